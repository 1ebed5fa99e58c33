"""The SSE transport: one ``GET .../live`` stream per subscription (docs/PROTOCOL.md, sections
5, 5.1 and 6), a group's members all on one (``GET /v1/groups/live``, section 5.3), for networks
that pass no WebSocket; the Python mirror of client-js/src/sse.js.

Each stream is a task: ask for the subscription's stream with its last event id in
``Last-Event-ID`` and the token in ``Authorization``, read its events until it ends or breaks,
then start over from the last event id, at once after an ``end`` frame, else after a
full-jitter delay. A stream has no way back to the gateway, so it names itself: a random id,
the ``stream`` parameter of each of its requests, under which ``reflects`` posts its waits
(``POST /v1/streams/{id}/wait``, docs/PROTOCOL.md section 4). A token cannot be replaced on an
open stream.
The transport gets a new token from the provider before the current one expires; the gateway
ends each stream at that expiry (``end``, ``token_expired``) and the stream opens again at once
with the new token.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import secrets
import time
from collections.abc import Iterable, Sequence
from typing import Any
from urllib.parse import quote, urlencode

import orjson
from yarl import URL

from liveviews.client._aiohttp import aiohttp
from liveviews.client.backoff import Backoff
from liveviews.client.errors import (
    ClientStateError,
    GatewayError,
    LiveviewsClientError,
    ProtocolError,
    http_error,
    is_token_error,
)
from liveviews.client.frames import Frame, decode_sse, decode_sse_group
from liveviews.client.group import Group
from liveviews.client.offsets import latest_of_each
from liveviews.client.query import Query
from liveviews.client.sselines import SseComment, SseEvent, SseParser
from liveviews.client.subscription import Subscription
from liveviews.client.transport import REFRESH_MARGIN, ClientState, Tokens, TransportName
from liveviews.log.events import Offset

log = logging.getLogger("liveviews.client")

C = ClientState
AT_ONCE = frozenset({"token_expired", "slow_consumer"})
"""``end`` codes after which a stream opens again without waiting (as over WebSocket)."""
NO_TIMEOUT = aiohttp.ClientTimeout()
"""A stream lives as long as it is wanted: the session's total timeout must not cut it."""
MAX_WAIT_OFFSETS = 64
"""Offsets the gateway takes in one wait."""


def stream_path(query: Query) -> str:
    """The path and query string of ``query``'s stream, percent-encoded: the view and the key
    are one path segment each (a ``/`` in a key is ``%2F``)."""
    if query.shape == "prefix":
        params = {"view": query.view}
        if query.prefix:
            params["prefix"] = query.prefix  # left out: the whole view
        if query.filter is not None:
            # The same text on every reconnect, whose Last-Event-ID is of this filter.
            params["filter"] = orjson.dumps(query.filter).decode()
        return "/v1/live?" + urlencode(params, quote_via=quote)
    assert query.key is not None
    path = f"/v1/views/{quote(query.view, safe='')}/{quote(query.key, safe='')}/live"
    if query.shape == "window":
        params = {"limit": str(query.limit)}
        if query.after is not None:
            params["after_score"] = repr(query.after.score)
            params["after_row"] = query.after.row
        path += "?" + urlencode(params, quote_via=quote)
    return path


def group_path(members: Iterable[tuple[str, str]]) -> str:
    """The path and query string of a group's stream: its members as pairs of ``view`` and
    ``key`` parameters, in order, which the gateway names ``m0``, ``m1``, ..."""
    params = [pair for view, key in members for pair in (("view", view), ("key", key))]
    return "/v1/groups/live?" + urlencode(params, quote_via=quote)


def path_of(sub: Subscription) -> str:
    """The path and query string of ``sub``'s stream."""
    if isinstance(sub, Group):
        return group_path((m.view, m.key) for m in sub.members)
    return stream_path(sub.query)


def wait_bodies(offsets: Iterable[Offset]) -> list[bytes]:
    """The bodies of the waits for ``offsets``: only the latest of each partition, since a
    frontier that covers it covers the others, in waits of at most 64 offsets."""
    wanted = [o.to_dict() for o in latest_of_each(offsets)]
    return [
        orjson.dumps({"offsets": wanted[i : i + MAX_WAIT_OFFSETS]})
        for i in range(0, len(wanted), MAX_WAIT_OFFSETS)
    ]


def token_expiry(token: str) -> float | None:
    """When a JWT expires (its ``exp``, read without checking the signature: that is the
    gateway's job); None for a token that is not a JWT or says no expiry."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    try:
        claims = orjson.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except ValueError:  # not base64, not JSON
        return None
    exp = claims.get("exp") if isinstance(claims, dict) else None
    if isinstance(exp, int | float) and not isinstance(exp, bool):
        return float(exp)
    return None


class EventStream:
    """One subscription's stream, opened again by itself until it is stopped or fails."""

    def __init__(self, transport: SseTransport, sub: Subscription, name: str) -> None:
        self.sub = sub
        self.name = name
        self.id = secrets.token_urlsafe(16)
        """Its ``stream`` parameter, the same on every request: where its waits are posted."""
        self.state = C.CONNECTING
        self._transport = transport
        self._backoff = Backoff(*transport.delays)
        self._refused: str | None = None
        """A token the gateway refused or ended the stream for: the next request takes another."""
        self._task = asyncio.create_task(self._run(), name=f"liveviews-client-{name}")

    def stop(self) -> None:
        self._task.cancel()

    async def stopped(self) -> None:
        await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self) -> None:
        try:
            while (delay := await self._attempt()) is not None:
                self.state = C.DISCONNECTED
                await asyncio.sleep(delay)
        except Exception as exc:  # a bug: say so on the subscription rather than hang it
            log.exception("the SSE stream of %s failed", self.sub)
            self.sub._fail(LiveviewsClientError(f"the SSE stream failed: {exc!r}"))
        finally:
            self._transport._forget(self)

    async def _attempt(self) -> float | None:
        """Open the stream once and read it to its end: the delay before the next attempt, or
        None when the subscription failed for good."""
        self.state = C.CONNECTING
        try:
            token = await self._transport.token(instead_of=self._refused)
        except Exception as exc:  # the token provider's own failure
            log.warning("could not get a token: %r", exc)
            self.sub._lost()
            return self._backoff.next()
        response: aiohttp.ClientResponse | None = None
        try:
            # The gateway reads the snapshot (or the missed deltas) before it answers: the
            # timeout covers that wait too.
            async with asyncio.timeout(self._transport.connect_timeout):
                response = await self._transport.get(self, token)
                refusal = None if response.status == 200 else await response.read()
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            if response is not None:
                response.close()
            log.info("could not open the SSE stream of %s: %r", self.sub, exc)
            self.sub._lost()
            return self._backoff.next()
        assert response is not None
        with contextlib.closing(response):
            if refusal is not None:
                return self._refused_with(http_error(response.status, refusal), token)
            self._refused = None
            self._backoff.reset()
            self.state = C.CONNECTED
            self.sub._open()
            # The gateway keeps no wait across a reconnect, and holds the stream's id from
            # before it answers: the waits still pending are posted again now.
            for offsets in self.sub._waiting_for():
                self._transport.post_wait(self, offsets)
            return await self._read(response, token)

    async def _read(self, response: aiohttp.ClientResponse, token: str) -> float | None:
        parser = SseParser()
        timeout = self._transport.heartbeat_timeout
        while True:
            try:
                async with asyncio.timeout(timeout):  # three missed heartbeats: a dead stream
                    chunk = await response.content.readany()
            except (aiohttp.ClientError, OSError, TimeoutError) as exc:
                log.info("the SSE stream of %s broke: %r", self.sub, exc)
                chunk = b""
            if not chunk:  # broken, or ended without a frame (the gateway shut down)
                self.sub._lost()
                return self._backoff.next()
            for item in parser.feed(chunk):
                if isinstance(item, SseComment):
                    continue  # a heartbeat: the stream is alive
                try:
                    end = self._deliver(item)
                except ProtocolError as exc:
                    self.sub._fail(exc)
                    return None
                if end is not None:
                    return self._ended(end, token)
                if not self.sub.active:
                    return None  # the frame did not fit the query: it failed

    def _deliver(self, event: SseEvent) -> Frame | None:
        """Hand ``event``'s frame to the subscription, or give back an ``end`` frame, which is
        the stream's own. Only a group's stream carries ``group`` events: on another one such
        an event is of a kind its subscription does not know, passed over as a newer gateway's."""
        if event.event == "group" and isinstance(self.sub, Group):
            self.sub._group(decode_sse_group(event.id, event.data, self.name))
            return None
        frame = decode_sse(event.event, event.id, event.data, self.name)
        if frame.kind == "end":
            return frame
        self.sub._frame(frame)
        return None

    def _ended(self, frame: Frame, token: str) -> float | None:
        """An ``end`` frame: open the stream again from the last event id, with a new token if
        that was why."""
        code, message = frame.data["code"], frame.data["message"]
        if code == "token_expired":
            if not self._transport.can_refresh:
                self.sub._fail(GatewayError(message, code=code, status=401))
                return None
            self._refused = token
        self.sub._lost()
        return 0.0 if code in AT_ONCE else self._backoff.next()

    def _refused_with(self, error: GatewayError, token: str) -> float | None:
        """An answer other than 200, before the stream started."""
        if error.code == "invalid_last_event_id":
            self.sub._forget_position(error)
            return 0.0
        if is_token_error(error) and self._transport.can_refresh and self._refused is None:
            self._refused = token
            return 0.0
        # What retrying cannot change (a token refused again, forbidden, unknown_view, ...).
        if is_token_error(error) or ((error.status or 500) < 500 and error.status != 429):
            self.sub._fail(error)
            return None
        self.sub._lost()
        return self._backoff.next()


class SseTransport:
    """Every subscription of a client on a stream of its own."""

    name: TransportName = "sse"

    def __init__(
        self,
        url: str,
        session: aiohttp.ClientSession,
        tokens: Tokens,
        delays: tuple[float, float],
        heartbeat_timeout: float,
        connect_timeout: float,
    ) -> None:
        self.url = url
        self.delays = delays
        self.heartbeat_timeout = heartbeat_timeout
        self.connect_timeout = connect_timeout
        self._session = session
        self._tokens = tokens
        self._streams: dict[Subscription, EventStream] = {}
        self._next = 0
        self._closed = False
        self._refresher: asyncio.Task[None] | None = None
        self._refreshing: str | None = None
        """The token the refresher replaces before it expires."""
        self._posts: set[asyncio.Task[None]] = set()
        """The waits being posted: kept from the garbage collector, cancelled on close."""

    # ---- what the client and subscriptions call ---------------------------------------------

    @property
    def state(self) -> ClientState:
        """``connected`` when every stream is open, ``disconnected`` when none is or there is
        none, else ``connecting``."""
        if self._closed:
            return C.CLOSED
        states = {stream.state for stream in self._streams.values()}
        if states in (set(), {C.DISCONNECTED}):
            return C.DISCONNECTED
        return C.CONNECTED if states == {C.CONNECTED} else C.CONNECTING

    @property
    def can_publish(self) -> bool:
        return False  # publish goes over HTTP

    def attach(self, sub: Subscription) -> None:
        self._next += 1
        self._streams[sub] = EventStream(self, sub, f"sse{self._next}")

    def detach(self, sub: Subscription) -> None:
        stream = self._streams.pop(sub, None)
        if stream is not None:
            stream.stop()

    def wait(self, sub: Subscription, offsets: list[Offset]) -> None:
        """Ask for ``sub``'s frontier as soon as it covers ``offsets``. A stream not open yet
        asks when it is (``EventStream._attempt``)."""
        stream = self._streams.get(sub)
        if stream is not None and stream.state == C.CONNECTED:
            self.post_wait(stream, offsets)

    async def publish(self, events: Sequence[Any], idempotency_key: str) -> list[Offset]:
        raise ClientStateError("over SSE a client publishes over HTTP")

    async def close(self) -> None:
        self._closed = True
        if self._refresher is not None:
            self._refresher.cancel()
            await asyncio.gather(self._refresher, return_exceptions=True)
        for post in self._posts:
            post.cancel()
        await asyncio.gather(*self._posts, return_exceptions=True)
        streams = list(self._streams.values())
        self._streams.clear()
        for stream in streams:
            stream.stop()
        await asyncio.gather(*(stream.stopped() for stream in streams))
        for stream in streams:
            stream.sub._close()

    # ---- what the streams call ----------------------------------------------------------------

    @property
    def can_refresh(self) -> bool:
        return self._tokens.can_refresh

    async def token(self, *, instead_of: str | None) -> str:
        """The token for a request: a new one instead of ``instead_of``, the one refused, unless
        another stream or the refresher replaced it already."""
        token = await self._tokens.token(refresh=instead_of is not None, instead_of=instead_of)
        self._refresh_before_expiry(token)
        return token

    async def get(self, stream: EventStream, token: str) -> aiohttp.ClientResponse:
        sub = stream.sub
        headers = {"Accept": "text/event-stream", "Authorization": f"Bearer {token}"}
        if sub.last_event_id is not None:
            headers["Last-Event-ID"] = sub.last_event_id
        path = path_of(sub)
        path += ("&" if "?" in path else "?") + urlencode({"stream": stream.id})
        # encoded=True: yarl would otherwise turn the key's %2F back into a path separator.
        url = URL(self.url + path, encoded=True)
        return await self._session.get(url, headers=headers, timeout=NO_TIMEOUT)

    def post_wait(self, stream: EventStream, offsets: list[Offset]) -> None:
        """Post a wait for ``stream``, fire and forget: lost, its frontier still comes with
        the gateway's progress, only later."""
        if self._closed:
            return
        for body in wait_bodies(offsets):
            post = asyncio.create_task(self._post(stream, body), name="liveviews-client-wait")
            self._posts.add(post)
            post.add_done_callback(self._posts.discard)

    async def _post(self, stream: EventStream, body: bytes) -> None:
        url = f"{self.url}/v1/streams/{stream.id}/wait"
        try:
            token = await self._tokens.token()
            headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
            async with self._session.post(
                url,
                data=body,
                headers=headers,
                timeout=aiohttp.ClientTimeout(total=self.connect_timeout),
            ) as response:
                if response.status != 204:
                    raise http_error(response.status, await response.read())
        except Exception as exc:  # the network, the gateway's refusal, the token provider
            log.debug("could not post a wait for the SSE stream of %s: %r", stream.sub, exc)

    def _forget(self, stream: EventStream) -> None:
        """``stream``'s task is over: its subscription failed or was unsubscribed."""
        if self._streams.get(stream.sub) is stream:
            del self._streams[stream.sub]

    # ---- tokens ------------------------------------------------------------------------------

    def _refresh_before_expiry(self, token: str) -> None:
        if not self._tokens.can_refresh or token == self._refreshing or self._closed:
            return
        if self._refresher is not None:
            self._refresher.cancel()
            self._refresher = None
        self._refreshing = token
        expires_at = token_expiry(token)
        remaining = None if expires_at is None else expires_at - time.time()
        if remaining is not None and remaining > 0:
            delay = remaining - min(REFRESH_MARGIN, remaining / 5)
            self._refresher = asyncio.create_task(
                self._refresh_later(token, delay), name="liveviews-client-token"
            )

    async def _refresh_later(self, token: str, delay: float) -> None:
        await asyncio.sleep(delay)
        self._refresher = None
        if not self._streams:
            self._refreshing = None  # nobody needs it now: the next stream asks
            return
        try:
            new = await self._tokens.token(refresh=True, instead_of=token)
        except Exception as exc:  # the streams ask the provider again when the gateway ends them
            log.warning("could not refresh the token: %r", exc)
            return
        self._refresh_before_expiry(new)
