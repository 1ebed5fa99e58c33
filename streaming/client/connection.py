"""The WebSocket transport: every subscription of a client on one socket (``/v1/ws``), and
publishing and token refresh on it (docs/PROTOCOL.md, section 5).

One task runs the connection: open a socket, sign in with an ``auth`` message, (re)subscribe
every subscription from its last event id, read until the socket closes, then wait a
full-jitter delay and start over. Subscription ids are fresh for every ``subscribe`` message,
and every timer carries the generation of the socket it was set on, so a frame or a timer of a
socket since replaced does nothing.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from liveviews.client._aiohttp import aiohttp
from liveviews.client.backoff import Backoff
from liveviews.client.errors import (
    ClientStateError,
    ConnectionLost,
    GatewayError,
    LiveviewsClientError,
    ProtocolError,
    is_token_error,
)
from liveviews.client.frames import (
    Authenticated,
    ErrorMessage,
    Frame,
    GroupFrame,
    Message,
    Published,
    decode,
    encode_auth,
    encode_publish,
    encode_subscribe,
    encode_subscribe_group,
    encode_unsubscribe,
    encode_wait,
)
from liveviews.client.group import Group
from liveviews.client.offsets import latest_of_each
from liveviews.client.subscription import Subscription
from liveviews.client.transport import REFRESH_MARGIN, ClientState, Tokens, TransportName
from liveviews.log.events import Offset

log = logging.getLogger("liveviews.client")

CLOSE_UNAUTHORIZED = 4401
RESUMABLE = frozenset({"slow_consumer", "store_unavailable", "too_many_subscriptions"})
"""Errors of a subscription after which it resumes instead of failing."""


C = ClientState

FallBack = Callable[[BaseException], Awaitable[bool]]
"""Asked, with why, when a handshake was refused and no socket ever opened: True if the
subscriptions went over to another transport, and this connection is done."""


def refused_handshake(exc: BaseException) -> bool:
    """Whether a failed handshake says that WebSockets do not get through: an HTTP answer other
    than 101 (but 401, the gateway's own refusal of a token), the connection dropped at the
    upgrade, or no answer in time. Not a connection that could not be made at all: the gateway
    is out of reach then, for SSE as much."""
    if isinstance(exc, aiohttp.WSServerHandshakeError):
        return exc.status != 401
    if isinstance(exc, aiohttp.ClientConnectorError):
        return False
    return isinstance(exc, TimeoutError | aiohttp.ServerDisconnectedError | aiohttp.ClientOSError)


class Connection:
    name: TransportName = "websocket"

    def __init__(
        self,
        ws_url: str,
        session: aiohttp.ClientSession,
        tokens: Tokens,
        backoff: Backoff,
        heartbeat_timeout: float,
        connect_timeout: float,
        fall_back: FallBack | None = None,
    ) -> None:
        self.state = C.DISCONNECTED
        self.subject: str | None = None
        self.expires_at: float | None = None
        self._url = ws_url
        self._session = session
        self._tokens = tokens
        self._backoff = backoff
        self._heartbeat_timeout = heartbeat_timeout
        self._connect_timeout = connect_timeout
        self._ids: dict[Subscription, str | None] = {}  # subscription -> its current sub id
        self._subs: dict[str, Subscription] = {}  # sub id -> subscription
        self._requests: dict[str, asyncio.Future[list[Offset]]] = {}
        self._next = 0
        self._gen = 0
        self._refreshing = False
        self._socket_error: LiveviewsClientError | None = None
        self._outbox: asyncio.Queue[str] | None = None
        self._timers: set[asyncio.TimerHandle] = set()
        self._refresher: asyncio.Task[None] | None = None
        self._wanted = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._fall_back = fall_back
        self._opened = False
        """Whether a handshake ever succeeded: from then on a failure is an outage, not a network
        that refuses WebSockets."""

    # ---- what the client and subscriptions call ---------------------------------------------

    def attach(self, sub: Subscription) -> None:
        self._ids[sub] = None
        if self.state == C.CONNECTED:
            self._subscribe(sub)
        self._wanted.set()
        if self._task is None:
            # The socket opens with the first subscription: a client that only publishes
            # needs none (publish goes over HTTP then).
            self._task = asyncio.create_task(self._run(), name="liveviews-client-connection")

    def detach(self, sub: Subscription) -> None:
        sub_id = self._ids.pop(sub, None)
        if sub_id is not None:
            self._subs.pop(sub_id, None)
            self._send(encode_unsubscribe(sub_id))

    def wait(self, sub: Subscription, offsets: list[Offset]) -> None:
        """Ask for ``sub``'s frontier as soon as it covers ``offsets``. A subscription not open
        yet asks when it is (``_subscribe``)."""
        sub_id = self._ids.get(sub)
        if sub_id is not None:
            self._send(encode_wait(sub_id, latest_of_each(offsets)))

    @property
    def can_publish(self) -> bool:
        return self.state == C.CONNECTED

    async def publish(self, events: Sequence[Any], idempotency_key: str) -> list[Offset]:
        self._next += 1
        req = f"r{self._next}"
        future: asyncio.Future[list[Offset]] = asyncio.get_running_loop().create_future()
        self._requests[req] = future
        self._send(encode_publish(req, events, idempotency_key))
        return await future

    def hand_over(self) -> list[Subscription]:
        """Give up for good, from within the connection's own task (``fall_back``): its
        subscriptions, untouched, for another transport to carry."""
        subs = list(self._ids)
        self._ids.clear()
        self.state = C.CLOSED
        return subs

    async def close(self) -> None:
        if self.state == C.CLOSED:
            return
        self.state = C.CLOSED
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        self._drop(ClientStateError("the client was closed"))
        for sub in list(self._ids):
            sub._close()
        self._ids.clear()

    # ---- the connection's task -----------------------------------------------------------------

    async def _run(self) -> None:
        while True:
            await self._wanted.wait()
            self._set_state(C.CONNECTING)
            try:
                token = await self._tokens.token(refresh=self._refreshing)
            except Exception as exc:  # the token provider's own failure
                self._drop(ConnectionLost(f"could not get a token: {exc!r}"))
                await asyncio.sleep(self._backoff.next())
                continue
            try:
                # A handshake cut short may never be reported: time it out.
                async with asyncio.timeout(self._connect_timeout):
                    ws = await self._session.ws_connect(
                        self._url,
                        timeout=aiohttp.ClientWSTimeout(ws_receive=None, ws_close=1.0),
                        heartbeat=None,  # the gateway pings; aiohttp answers on its own
                        max_msg_size=0,
                    )
            except Exception as exc:  # a refused handshake, the network
                self._drop(ConnectionLost(f"could not open a WebSocket: {exc!r}"))
                if (
                    self._fall_back is not None
                    and not self._opened
                    and refused_handshake(exc)
                    and await self._fall_back(exc)
                ):
                    return
                await asyncio.sleep(self._backoff.next())
                continue
            self._opened = True
            code, error = await self._serve(ws, token)
            self._drop(error)
            if code == CLOSE_UNAUTHORIZED:
                if self._tokens.can_refresh and not self._refreshing:
                    self._refreshing = True
                    continue  # at once, with a new token
                self._refused(error)
                continue
            await asyncio.sleep(self._backoff.next())

    async def _serve(
        self, ws: aiohttp.ClientWebSocketResponse, token: str
    ) -> tuple[int | None, LiveviewsClientError]:
        """Read the socket until it closes: its close code, and why."""
        self._socket_error = None
        outbox: asyncio.Queue[str] = asyncio.Queue()
        self._outbox = outbox
        writer = asyncio.create_task(self._write(ws, outbox))
        try:
            outbox.put_nowait(encode_auth(token))
            return await self._read(ws)
        finally:
            self._outbox = None
            writer.cancel()
            if not ws.closed:
                await ws.close()

    async def _read(
        self, ws: aiohttp.ClientWebSocketResponse
    ) -> tuple[int | None, LiveviewsClientError]:
        timeout = self._connect_timeout
        while True:
            try:
                msg = await ws.receive(timeout=timeout)
            except TimeoutError:
                return None, ConnectionLost(f"nothing heard from the gateway for {timeout} s")
            # Three missed heartbeats once signed in; the handshake's own timeout before.
            timeout = self._heartbeat_timeout if self.state == C.CONNECTED else timeout
            if msg.type == aiohttp.WSMsgType.TEXT:
                try:
                    self._message(decode(msg.data))
                except ProtocolError as exc:
                    await ws.close(code=1002, message=b"protocol error")
                    return 1002, exc
            elif msg.type in (
                aiohttp.WSMsgType.CLOSE,
                aiohttp.WSMsgType.CLOSING,
                aiohttp.WSMsgType.CLOSED,
                aiohttp.WSMsgType.ERROR,
            ):
                code = ws.close_code
                return code, self._socket_error or ConnectionLost(f"the WebSocket closed ({code})")

    async def _write(self, ws: aiohttp.ClientWebSocketResponse, outbox: asyncio.Queue[str]) -> None:
        # One writer keeps the messages in the order they were made (a subscribe before its wait).
        try:
            while True:
                await ws.send_str(await outbox.get())
        except (aiohttp.ClientError, ConnectionError):
            return  # the reader sees the socket close

    def _send(self, text: str) -> None:
        # Only on a signed-in socket: what a closed one would have carried is sent again by
        # the next (subscriptions from their last event id, waits with them).
        if self._outbox is not None and self.state == C.CONNECTED:
            self._outbox.put_nowait(text)

    def _drop(self, error: LiveviewsClientError) -> None:
        """The socket is gone: timers of it are stale, subscriptions wait to resume, pending
        publishes fail (each with its own error, which will carry its batch's key)."""
        self._gen += 1
        for timer in self._timers:
            timer.cancel()
        self._timers.clear()
        if self._refresher is not None:
            self._refresher.cancel()
            self._refresher = None
        self._subs.clear()
        for sub in self._ids:
            self._ids[sub] = None
            sub._lost()
        for future in self._requests.values():
            if not future.done():
                future.set_exception(
                    ConnectionLost(
                        "the connection closed before the gateway answered; the events may or may "
                        f"not have been appended ({error.message})"
                    )
                )
        self._requests.clear()
        if self.state != C.CLOSED:
            self._set_state(C.DISCONNECTED)

    def _refused(self, error: LiveviewsClientError) -> None:
        """The gateway refused every token it was given: the subscriptions fail; a later
        subscribe tries again."""
        log.warning("the gateway refused the token: %s", error.message)
        self._refreshing = False
        self._wanted.clear()
        for sub in list(self._ids):
            sub._fail(error)
        self._ids.clear()

    def _set_state(self, state: ClientState) -> None:
        if self.state != C.CLOSED:
            self.state = state

    # ---- messages -------------------------------------------------------------------------

    def _message(self, msg: Message) -> None:
        if isinstance(msg, Frame):
            self._frame(msg)
        elif isinstance(msg, GroupFrame):
            sub = self._subs.get(msg.sub)
            if isinstance(sub, Group):
                sub._group(msg)
        elif isinstance(msg, Authenticated):
            self._authenticated(msg)
        elif isinstance(msg, Published):
            future = self._requests.pop(msg.req, None)
            if future is not None and not future.done():
                future.set_result(msg.offsets)
        elif isinstance(msg, ErrorMessage):
            self._error(msg)
        # heartbeat, unsubscribed, and types this client does not know: nothing to do

    def _authenticated(self, msg: Authenticated) -> None:
        first = self.state != C.CONNECTED
        self.subject, self.expires_at = msg.subject, msg.expires_at
        self._refreshing = False
        self._schedule_refresh(msg.expires_at)
        if first:
            self._backoff.reset()
            self._set_state(C.CONNECTED)
            for sub in list(self._ids):
                self._subscribe(sub)

    def _frame(self, frame: Frame) -> None:
        sub = self._subs.get(frame.sub)
        if sub is None:
            return  # a subscription since unsubscribed or resubscribed
        if frame.kind == "end":
            self._resubscribe(frame.sub, sub, 0)
        else:
            sub._frame(frame)

    def _error(self, msg: ErrorMessage) -> None:
        error = msg.error
        if msg.req is not None:
            future = self._requests.pop(msg.req, None)
            if future is not None and not future.done():
                future.set_exception(error)
        elif msg.sub is not None:
            self._subscription_error(msg.sub, error)
        elif is_token_error(error) and self.state != C.CONNECTED:
            self._socket_error = error  # the answer to our auth: a close 4401 follows
        else:
            # A refused refresh leaves the socket signed in until its token expires; the
            # gateway then closes it with 4401 and this error says why.
            log.warning("the gateway: %s (%s)", error.message, error.code)
            self._socket_error = self._socket_error or error

    def _subscription_error(self, sub_id: str, error: GatewayError) -> None:
        sub = self._subs.get(sub_id)
        if sub is None:
            return
        if error.code in RESUMABLE:
            sub._lost()
            delay = 0 if error.code == "slow_consumer" else self._backoff.next()
            self._resubscribe(sub_id, sub, delay)
        elif error.code == "invalid_last_event_id":
            sub._forget_position(error)
            self._resubscribe(sub_id, sub, 0)
        else:
            del self._subs[sub_id]
            self._ids.pop(sub, None)
            sub._fail(error)

    def _subscribe(self, sub: Subscription) -> None:
        self._next += 1
        sub_id = f"s{self._next}"
        self._ids[sub] = sub_id
        self._subs[sub_id] = sub
        if isinstance(sub, Group):
            self._send(encode_subscribe_group(sub_id, sub.member_ids()))
            for offsets in sub._waiting_for():
                self._send(encode_wait(sub_id, latest_of_each(offsets)))
            sub._open()
            return
        q = sub.query
        after = None if q.after is None else (q.after.score, q.after.row)
        self._send(
            encode_subscribe(
                sub_id,
                q.view,
                key=q.key,
                prefix=q.prefix,
                limit=q.limit,
                after=after,
                filter=q.filter,  # again with every resume: its ids are of this filter
                last_event_id=sub.last_event_id,
            )
        )
        for offsets in sub._waiting_for():
            self._send(encode_wait(sub_id, latest_of_each(offsets)))
        sub._open()

    def _resubscribe(self, sub_id: str, sub: Subscription, delay: float) -> None:
        self._subs.pop(sub_id, None)
        self._ids[sub] = None
        gen = self._gen

        def again() -> None:
            if gen == self._gen and sub in self._ids and self._ids[sub] is None:
                self._subscribe(sub)

        self._timers.add(asyncio.get_running_loop().call_later(delay, again))

    def _schedule_refresh(self, expires_at: float) -> None:
        if self._refresher is not None:
            self._refresher.cancel()
        if self._tokens.can_refresh:
            remaining = expires_at - time.time()
            delay = max(0.0, remaining - min(REFRESH_MARGIN, remaining / 5))
            self._refresher = asyncio.create_task(self._refresh_later(self._gen, delay))

    async def _refresh_later(self, gen: int, delay: float) -> None:
        """Send a new token before this one expires: the socket and its subscriptions stay."""
        await asyncio.sleep(delay)
        try:
            token = await self._tokens.token(refresh=True)
        except Exception as exc:  # the provider's own failure: the socket expires, and reconnects
            log.warning("could not refresh the token: %r", exc)
            return
        if gen == self._gen and self.state == C.CONNECTED:
            self._send(encode_auth(token))
