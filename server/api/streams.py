"""``GET /v1/views/{view}/{key}/live``: one subscription as a Server-Sent Events stream.

The snapshot (or the missed deltas, or a reset and a snapshot) is read before the response
starts, so a failure to read it is an ordinary error response. Then the stream sends the
subscription's frames as they come, a heartbeat comment when idle, and ends with an ``end``
frame when the token expires or the subscriber falls too far behind.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable

from sse_starlette.sse import EventSourceResponse
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from server.admission import Slot, client_address
from server.api.params import single, single_header, view_and_key, whole_number
from server.api.responses import hand_over
from server.auth import READ, Principal, authenticate
from server.errors import BadRequest
from server.fanout.subscription import Subscription
from server.feed.log import RECENT, LogListener
from server.gateway import Gateway
from server.live.sse import begin, body_of, serve
from server.wire import frames
from server.wire.eventid import EventId


def resume_id(request: Request) -> EventId | None:
    """The ``Last-Event-ID`` header wins over the ``last_event_id`` query parameter.

    Both are checked: a malformed id is the client's mistake even where the other one wins.
    """
    header = single_header(request, "Last-Event-ID", "invalid_last_event_id")
    raws = (header, single(request, "last_event_id"))
    ids = [EventId.parse(raw) if raw else None for raw in raws]
    return ids[0] or ids[1]


class SubscriptionResponse(Response):
    """A started subscription's stream (``server.live.sse``); always detaches and frees its
    connection slot."""

    def __init__(self, sub: Subscription, first: list[frames.Frame], principal: Principal,
                 gw: Gateway, slot: Slot) -> None:  # fmt: skip
        self.sub = sub
        self.first: list[frames.Frame] | None = first
        self.expires_at = principal.expires_at
        self.gateway = gw
        self.slot = slot
        self.background = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        sub, gw, expires_at, slot = self.sub, self.gateway, self.expires_at, self.slot
        first, self.first = self.first or [], None

        def close() -> None:
            sub.close()
            gw.admission.release(slot)

        try:
            await begin(first, gw.metrics, send)
        except BaseException:
            close()
            raise

        async def rest(receive: Receive, send: Send) -> None:
            await serve(
                sub, expires_at, gw.ticker, gw.metrics, scope, receive, send, close,
                gw.settings.send_timeout_seconds,
            )  # fmt: skip

        await hand_over(scope, rest, receive, send)


class LiveResponse(EventSourceResponse):
    """An SSE response that always detaches its reader and frees its connection slot."""

    def __init__(
        self, content: AsyncIterator[bytes], close: Callable[[], None], gw: Gateway, slot: Slot
    ) -> None:
        super().__init__(content, ping=0, send_timeout=gw.settings.send_timeout_seconds)
        self.close = close
        self.gateway = gw
        self.slot = slot

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.close()
            self.gateway.admission.release(self.slot)


async def live(request: Request) -> Response:
    gw: Gateway = request.app.state.gateway
    principal = authenticate(request, gw.auth, READ)
    view, key = view_and_key(request)
    gw.readable_view(principal, view, key)
    resume = resume_id(request)
    if request.method == "HEAD":
        return Response(media_type="text/event-stream")
    slot = gw.admission.admit("sse", principal.subject, client_address(request.scope))
    sub = Subscription(gw.source, view, key, resume)
    try:
        first = await sub.start()
    except BaseException:
        gw.admission.release(slot)
        raise
    return SubscriptionResponse(sub, first, principal, gw, slot)


DEFAULT_RECENT = 20


def _recent(request: Request) -> int:
    raw = single(request, "recent")
    if raw is None:
        return DEFAULT_RECENT
    recent = whole_number(raw, RECENT)
    if recent is None:
        raise BadRequest(
            f"'recent' must be a whole number from 0 to {RECENT}, not {raw[:20]!r}.",
            code="invalid_parameter",
        )
    return recent


async def _log_stream(
    listener: LogListener, recent: int, principal: Principal, gw: Gateway
) -> AsyncIterator[bytes]:
    metrics, heartbeat = gw.metrics, gw.settings.heartbeat_seconds
    first = listener.recent[len(listener.recent) - recent :] if recent else []
    if first:
        yield body_of(first, metrics)
    while True:
        remaining = principal.expires_at - time.time()
        if remaining <= 0:
            end = frames.end("token_expired", "the token expired; reconnect with a new one.", None)
            yield body_of([end], metrics)
            return
        try:
            async with asyncio.timeout(min(heartbeat, remaining)):
                await listener.wake.wait()
        except TimeoutError:
            if remaining > heartbeat:
                metrics.bytes_out += len(frames.SSE_HEARTBEAT)
                yield frames.SSE_HEARTBEAT
            continue
        if listener.overflowed:
            end = frames.end("slow_consumer", "this reader fell too far behind; reconnect.", None)
            yield body_of([end], metrics)
            return
        out = listener.take()
        if out:
            yield body_of(out, metrics)


async def log_live(request: Request) -> Response:
    """``GET /v1/log/live``: events as they are appended to the log, after the recent ones."""
    gw: Gateway = request.app.state.gateway
    feed = gw.log_feed
    assert feed is not None, "the route exists only with LV_LOG_FEED on"
    principal = authenticate(request, gw.auth, READ)
    recent = _recent(request)
    slot = gw.admission.admit("sse", principal.subject, client_address(request.scope))
    try:
        listener = await feed.attach()
    except BaseException:
        gw.admission.release(slot)
        raise
    return LiveResponse(
        _log_stream(listener, recent, principal, gw), lambda: feed.detach(listener), gw, slot
    )
