"""The Server-Sent Events streams: a view's subscription (``GET /v1/views/{view}/{key}/live``,
``GET /v1/live``) and the log feed (``GET /v1/log/live``), and the waits posted for a
subscription's stream (``POST /v1/streams/{stream}/wait``).

The first frames (the snapshot, or the missed deltas, or a reset and a snapshot; the log's
recent entries) are read before the response starts, so a failure to read them is an ordinary
error response. Then one sender (``liveviews.gateway.live.sse``) sends the stream's frames as
they come, a heartbeat comment when idle, and ends it with an ``end`` frame when the token
expires or the client falls too far behind, whichever stream it is.
"""

from __future__ import annotations

from collections.abc import Callable

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from liveviews.gateway.admission import Slot, client_address
from liveviews.gateway.api.params import (
    path_segments,
    single,
    single_header,
    view_and_key,
    whole_number,
)
from liveviews.gateway.api.publish import parse_body
from liveviews.gateway.api.queries import after_rank, prefix_subscription, window_subscription
from liveviews.gateway.api.responses import hand_over, read_json
from liveviews.gateway.api.rest import get_view
from liveviews.gateway.api.sessions import wanted_offsets
from liveviews.gateway.auth import READ, Principal, authenticate
from liveviews.gateway.errors import BadRequest, Unprocessable
from liveviews.gateway.fanout.group import Group
from liveviews.gateway.fanout.subscription import Subscription
from liveviews.gateway.feed import waits
from liveviews.gateway.feed.log import RECENT, LogReader
from liveviews.gateway.feed.queries import Rank
from liveviews.gateway.gateway import Gateway
from liveviews.gateway.live.source import FrameSource
from liveviews.gateway.live.sse import begin, serve
from liveviews.gateway.wire import filters, frames
from liveviews.gateway.wire.eventid import EventId, parse_group_event_id


def resume_id(request: Request) -> EventId | None:
    """The ``Last-Event-ID`` header wins over the ``last_event_id`` query parameter.

    Both are checked: a malformed id is the client's mistake even where the other one wins.
    """
    header = single_header(request, "Last-Event-ID", "invalid_last_event_id")
    raws = (header, single(request, "last_event_id"))
    ids = [EventId.parse(raw) if raw else None for raw in raws]
    return ids[0] or ids[1]


def raw_resume_id(request: Request) -> str | None:
    """``resume_id`` for a query-shaped subscription, whose ids the subscription parses."""
    header = single_header(request, "Last-Event-ID", "invalid_last_event_id")
    return header or single(request, "last_event_id") or None


class StreamResponse(Response):
    """A started stream (``liveviews.gateway.live.sse``); always closes its source and frees its
    connection slot."""

    def __init__(self, sub: FrameSource, first: list[frames.Frame], principal: Principal,
                 gw: Gateway, slot: Slot, forget: Callable[[], None]) -> None:  # fmt: skip
        self.sub = sub
        self.forget = forget
        self.first: list[frames.Frame] | None = first
        self.expires_at = principal.expires_at
        self.gateway = gw
        self.slot = slot
        self.background = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        sub, gw, expires_at, slot = self.sub, self.gateway, self.expires_at, self.slot
        first, self.first = self.first or [], None
        forget = self.forget

        def close() -> None:
            forget()
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


async def live(request: Request) -> Response:
    """``GET /v1/views/{view}/{key}/live``: a key, or with ``limit`` a window of it."""
    segments = path_segments(request)
    if segments is not None and len(segments) == 2:
        # A key that ends in "/live", written %2F: the decoded path looked like a stream's.
        return await get_view(request)
    gw: Gateway = request.app.state.gateway
    principal = await authenticate(request, gw.auth, READ)
    view, key = view_and_key(request, tail="live")
    gw.readable_view(principal, view, key)
    if single(request, "filter") is not None:
        raise BadRequest(
            "'filter' goes with a prefix or whole-view subscription: "
            "/v1/live?view=<view>&prefix=<prefix>&filter=<filter>.",
            code="invalid_parameter",
        )
    sub: Subscription
    limit = single(request, "limit")
    if limit is not None:
        count = whole_number(limit, MAX_WINDOW)
        if count is None:
            raise BadRequest(
                f"'limit' must be a whole number from 1 to the view's limit, not {limit[:20]!r}.",
                code="invalid_parameter",
            )
        sub = window_subscription(
            gw, principal, view, key, count, _after(request), raw_resume_id(request)
        )
    else:
        for name in ("after_score", "after_row"):
            if single(request, name) is not None:
                raise BadRequest(f"'{name}' goes with 'limit' only.", code="invalid_parameter")
        sub = Subscription(gw.source, view, key, resume_id(request))
    return await _stream(request, gw, principal, sub)


MAX_GROUP_MEMBERS = 16


async def group_live(request: Request) -> Response:
    """``GET /v1/groups/live?view=<v>&key=<k>&view=<v>&key=<k>...``: a group of keys released
    together (docs/PROTOCOL.md, section 5.3), in one stream; its members are named ``m0``,
    ``m1``, ... in the order given."""
    gw: Gateway = request.app.state.gateway
    principal = await authenticate(request, gw.auth, READ)
    views, keys = request.query_params.getlist("view"), request.query_params.getlist("key")
    if not 1 <= len(views) <= MAX_GROUP_MEMBERS or len(views) != len(keys):
        raise BadRequest(
            f"a group names 1 to {MAX_GROUP_MEMBERS} members, each a 'view' and a 'key' "
            "parameter, in pairs: /v1/groups/live?view=<view>&key=<key>&view=<view>&key=<key>.",
            code="invalid_parameter",
        )
    for view, key in zip(views, keys, strict=True):
        gw.readable_view(principal, view, key)
    raw = raw_resume_id(request)
    resumed = parse_group_event_id(raw) if raw else {}
    members = [(f"m{i}", view, key, resumed.get(f"m{i}"))
               for i, (view, key) in enumerate(zip(views, keys, strict=True))]  # fmt: skip
    return await _stream(request, gw, principal, Group(gw.source, gw.cuts, "", members))


def _after(request: Request) -> Rank | None:
    score, row = single(request, "after_score"), single(request, "after_row")
    if score is None and row is None:
        return None
    try:
        number: object = float(score) if score is not None else None
    except ValueError:
        number = None
    return after_rank(number, row, "invalid_parameter")


async def query_live(request: Request) -> Response:
    """``GET /v1/live?view=&prefix=``: the keys of a view with a prefix, or all of them."""
    gw: Gateway = request.app.state.gateway
    principal = await authenticate(request, gw.auth, READ)
    view, prefix = single(request, "view"), single(request, "prefix") or ""
    if not view:
        raise BadRequest("name the view: /v1/live?view=<view>&prefix=<prefix>.",
                         code="invalid_parameter")  # fmt: skip
    for name in ("key", "limit", "after_score", "after_row"):
        if single(request, name) is not None:
            raise BadRequest(
                f"'{name}' is not a parameter of a prefix subscription; for one key or a "
                "window of it use /v1/views/{view}/{key}/live.",
                code="invalid_parameter",
            )
    principal.require(READ)
    raw_filter = single(request, "filter")
    where = filters.parse_json(raw_filter) if raw_filter is not None else None
    sub = prefix_subscription(gw, principal, view, prefix, raw_resume_id(request), where)
    return await _stream(request, gw, principal, sub)


async def _stream(
    request: Request, gw: Gateway, principal: Principal, sub: FrameSource
) -> Response:
    """Start ``sub`` in a connection slot of its own: a stream of its first frames, then the
    rest (``StreamResponse``)."""
    stream = waits.stream_id(single(request, "stream"))
    if request.method == "HEAD":
        return Response(media_type="text/event-stream")
    slot = gw.admission.admit("sse", principal.subject, client_address(request.scope))
    forget = _nothing
    if stream is not None and isinstance(sub, Subscription | Group):
        forget = gw.stream_waits.open(stream, principal.subject, sub)
    try:
        first = await sub.start()
    except BaseException:
        forget()
        gw.admission.release(slot)
        raise
    return StreamResponse(sub, first, principal, gw, slot, forget)


def _nothing() -> None:
    pass


async def stream_wait(request: Request) -> Response:
    """``POST /v1/streams/{stream}/wait``: the client of the SSE stream it named ``stream``
    waits for its view to reflect some offsets (read-your-writes); the process holding the
    stream sends it the covering frontier as soon as it reads one. Answered 204 whether or not
    such a stream is open: it may be held by another gateway process."""
    gw: Gateway = request.app.state.gateway
    principal = await authenticate(request, gw.auth, READ)
    stream = waits.stream_id(request.path_params["stream"])
    assert stream is not None
    body = parse_body(await read_json(request, gw.settings.max_body_bytes))
    offsets = body.get("offsets") if isinstance(body, dict) else None
    wanted = wanted_offsets(offsets, "invalid_offsets", Unprocessable)
    await waits.post(gw.client, stream, principal.subject, wanted)
    return Response(status_code=204)


DEFAULT_RECENT = 20
MAX_WINDOW = 1_000_000
"""Above any view's limit: a larger 'limit' is refused as not a number of rows at all."""


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


async def log_live(request: Request) -> Response:
    """``GET /v1/log/live``: events as they are appended to the log, after the recent ones."""
    gw: Gateway = request.app.state.gateway
    feed = gw.log_feed
    assert feed is not None, "the route exists only with LV_LOG_FEED on"
    principal = await authenticate(request, gw.auth, READ)
    return await _stream(request, gw, principal, LogReader(feed, _recent(request)))
