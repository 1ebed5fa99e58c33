"""What every endpoint shares: JSON answers, bounded JSON request bodies, and the hand-over of
a started stream's rest to the application's outermost call."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from liveviews.gateway.api.params import number_over
from liveviews.gateway.errors import PayloadTooLarge, UnsupportedMediaType


def json_response(
    body: object, status: int = 200, headers: Mapping[str, str] | None = None
) -> Response:
    return Response(orjson.dumps(body), status, headers, media_type="application/json")


def is_json(content_type: str) -> bool:
    """``application/json`` or a ``+json`` type (RFC 6839), with any parameters."""
    media = content_type.partition(";")[0].strip().lower()
    return media == "application/json" or (
        media.startswith("application/") and media.endswith("+json")
    )


async def read_json(request: Request, limit: int) -> bytes:
    """The body of a request that must send JSON, refused with 415 if it says it is anything
    else. A browser sends a page's cross-origin request without asking the gateway first only
    when its type is one a form could send (text/plain, say), never application/json."""
    content_type = request.headers.get("content-type", "")
    if not is_json(content_type):
        sent = content_type.partition(";")[0].strip()[:100]
        raise UnsupportedMediaType(
            "send the body as JSON, with Content-Type: application/json"
            + (f", not {sent!r}." if sent else "; this request has no Content-Type.")
        )
    return await read_body(request, limit)


async def read_body(request: Request, limit: int) -> bytes:
    """The body, refused with 413 as soon as it is known to exceed ``limit`` bytes."""
    too_large = PayloadTooLarge(f"the body is larger than {limit} bytes; send smaller batches.")
    if number_over(request.headers.get("content-length", ""), limit):
        raise too_large
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise too_large
        chunks.append(chunk)
    return b"".join(chunks)


HELD = "liveviews.held"
"""The scope key of the list where a started stream leaves the rest of its life for the
application's outermost call (``liveviews.gateway.app``), once its response head has gone out
through the framework: the connection then waits in a coroutine of its own, not in the framework's
stack of middleware, routing and exception wrappers (~5 KB per idle stream)."""

Rest = Callable[[Receive, Send], Awaitable[None]]


async def hand_over(scope: Scope, rest: Rest, receive: Receive, send: Send) -> None:
    """Leave ``rest`` of a started response to the application's outermost call, which runs
    it with the server's own ``receive`` and ``send``; or run it here if nothing takes it."""
    held = scope.get(HELD)
    if isinstance(held, list) and not held:
        held.append(rest)
    else:
        await rest(receive, send)
