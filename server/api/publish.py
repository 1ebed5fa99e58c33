"""Publishing: from a request body to offsets in the log, all or nothing.

A body is one event (``{"type", "payload", "time"?}``), an array of events, or
``{"events": [...]}``. Every event is validated against the application's schemas and must be
authored by the token's subject before anything is written; then the batch is one MULTI/EXEC.
"""

from __future__ import annotations

from typing import Any

import orjson

from server.auth import Principal
from server.errors import BadRequest, Forbidden, PayloadTooLarge, Unprocessable
from server.feed import store
from streaming.core.app import App
from streaming.core.errors import InvalidEvent
from streaming.core.events import Offset


def parse_body(body: bytes) -> Any:
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise BadRequest(
            f"the body is not valid JSON ({exc.msg} at character {exc.pos}).", code="malformed_json"
        ) from None


def events_of(document: Any, max_events: int) -> list[Any]:
    """The list of raw events a document carries."""
    if isinstance(document, dict) and set(document) == {"events"}:
        document = document["events"]
        if not isinstance(document, list):
            raise Unprocessable("'events' must be an array of events.", code="wrong_type")
    raws = document if isinstance(document, list) else [document]
    if not raws:
        raise Unprocessable("the batch is empty; send at least one event.", code="empty_batch")
    if len(raws) > max_events:
        raise PayloadTooLarge(
            f"a batch holds at most {max_events} events, not {len(raws)}; split it.",
            code="too_many_events",
        )
    return raws


def offset_dict(offset: Offset) -> dict[str, Any]:
    return {**offset.to_dict(), "token": str(offset)}


async def publish(
    client: store.Client, app: App, partitions: int, principal: Principal, raws: list[Any]
) -> list[Offset]:
    try:
        events = app.validate_batch(raws)
    except InvalidEvent as exc:
        raise Unprocessable(exc.message, code=exc.code, index=exc.index, field=exc.field) from None
    for i, event in enumerate(events):
        author = app.event_types[event.type].author
        if author is not None and author(event.payload) != principal.subject:
            raise Forbidden(
                f"event {i}: you are signed in as {principal.subject!r} and may publish only "
                f"as yourself, not as {author(event.payload)!r}.",
                code="not_author",
                index=i,
            )
    return await store.append(client, events, partitions)
