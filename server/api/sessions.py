"""``/v1/ws``: a WebSocket session: many subscriptions, publishing and token refresh on one socket.

Client messages are JSON objects with a ``type``: ``auth``, ``subscribe``, ``unsubscribe``,
``publish``, ``wait``. They are handled one at a time, in order, by a task that runs only while some
wait. Each subscription sends the same frames as SSE, tagged with the client's subscription
id, through its own sender (``liveviews.gateway.live.ws``). Under the gateway's uvicorn protocols
the socket owns its connection (``liveviews.gateway.live.sockets.OwnedSocket``), so an idle socket
holds no task. The process's ticker (``liveviews.gateway.live.ticker``) sends heartbeats, closes
sockets whose token expired, and runs each socket's keepalive. docs/PROTOCOL.md describes the
messages and close codes.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from typing import Any

import orjson
from redis.exceptions import RedisError
from starlette.types import Receive, Send
from starlette.websockets import WebSocket

from liveviews.errors import StoreMismatch
from liveviews.gateway._uvicorn import websocket_protocol
from liveviews.gateway.admission import Slot, client_address
from liveviews.gateway.api.publish import events_of, offset_dict
from liveviews.gateway.api.queries import after_rank, prefix_subscription, window_subscription
from liveviews.gateway.api.responses import hand_over
from liveviews.gateway.auth import (
    PUBLISH,
    READ,
    Principal,
    by_cookie,
    check_origin,
    refuse_service_by_cookie,
    token_from,
)
from liveviews.gateway.errors import BadRequest, Forbidden, GatewayError, Unauthorized, Unavailable
from liveviews.gateway.fanout.group import Group
from liveviews.gateway.fanout.lane import Wanted
from liveviews.gateway.fanout.subscription import Subscription
from liveviews.gateway.gateway import Gateway
from liveviews.gateway.live.sender import log_failure
from liveviews.gateway.live.sockets import AsgiSocket, OwnedSocket, Socket
from liveviews.gateway.live.ws import WsSender
from liveviews.gateway.wire import filters, frames
from liveviews.gateway.wire.eventid import EventId, position_tuple
from liveviews.log.events import POSITION_RE

log = logging.getLogger("liveviews.gateway.ws")

CLOSE_UNAUTHORIZED = 4401
CLOSE_TRY_AGAIN_LATER = 1013
CLOSE_SERVICE_RESTART = 1012
CLOSE_SLOW_READER = (1008, "slow consumer")
UNAUTHENTICATED_CLOSE_SECONDS = 1.0
"""How long a socket that never signed in has to answer its close before it is dropped (not
at once: closing a connection the client is still sending on resets it, and the client would
lose the reason it was closed)."""
MAX_ID_LENGTH = 64
INBOX_LIMIT = 16
"""Client messages waiting to be handled before the socket stops reading more."""


def _ident(msg: dict[str, Any], name: str) -> str:
    value = msg.get(name)
    if not isinstance(value, str) or not 1 <= len(value) <= MAX_ID_LENGTH:
        raise BadRequest(
            f"{name!r} must be a string of 1 to {MAX_ID_LENGTH} characters.", code="invalid_message"
        )
    return value


MAX_WAIT_OFFSETS = 64
MAX_GROUP_MEMBERS = 16
"""Subscriptions one group releases together (each also counts against the socket's limit)."""


def wanted_offsets(
    raw: Any, code: str = "invalid_message", error: type[GatewayError] = BadRequest
) -> Wanted:
    """A wait's ``offsets`` (``[{"partition", "id"}, ...]``, as publish answered them) as the
    newest entry id wanted in each partition; refused as ``error`` with ``code``."""
    if not isinstance(raw, list) or not 1 <= len(raw) <= MAX_WAIT_OFFSETS:
        raise error(
            f"'offsets' must be a list of 1 to {MAX_WAIT_OFFSETS} offsets "
            '{"partition", "id"}, as publish answers them.',
            code=code,
        )
    wanted: Wanted = {}
    for offset in raw:
        partition = offset.get("partition") if isinstance(offset, dict) else None
        entry = offset.get("id") if isinstance(offset, dict) else None
        if (
            not isinstance(partition, int)
            or isinstance(partition, bool)
            or partition < 0
            or not isinstance(entry, str)
            or POSITION_RE.fullmatch(entry) is None
        ):
            raise error(
                f'{offset!r} is not an offset; each is {{"partition": <n>, "id": '
                '"<ms>-<seq>" or "<n>"}, as publish answers it.',
                code=code,
            )
        at = position_tuple(entry)
        key = str(partition)
        if wanted.get(key, (0, 0)) < at:
            wanted[key] = at
    return wanted


class Session:
    """One open socket: its principal, its subscriptions, and the client's messages to handle.

    It is the socket's ``Handler`` (``liveviews.gateway.live.sockets``) and one of the ticker's
    streams.
    """

    __slots__ = ("gw", "sock", "slot", "principal", "auth_deadline", "senders", "last_write",
                 "closed", "unread", "reads", "_inbox", "_task")  # fmt: skip

    def __init__(self, gw: Gateway, sock: Socket, slot: Slot) -> None:
        self.gw = gw
        self.sock = sock
        self.slot = slot
        """Its place in the process's connection budgets (``liveviews.gateway.admission``)."""
        self.principal: Principal | None = None
        # Monotonic: a wall clock set back would keep a socket that never signs in, and its
        # place in the budget of those waiting to, for as long as the clock went back.
        self.auth_deadline = time.monotonic() + gw.settings.ws_auth_timeout_seconds
        self.senders: dict[str, WsSender] = {}
        self.last_write = gw.ticker.now
        self.closed = False
        self.unread = 0
        """Answers written while the client had not taken earlier writes (``reply``)."""
        self.reads = asyncio.Lock()
        """Held by a subscription of the socket while it reads the store: one read at a time,
        however many subscribe messages the client sends."""
        self._inbox: deque[bytes] | None = None
        self._task: asyncio.Task[None] | None = None

    def open(self, principal: Principal | None) -> None:
        """Start serving: signed in already if the handshake carried a valid token."""
        self.gw.ticker.add(self)
        if self.gw.ticker.exiting:
            self.exit()
        elif principal is not None:
            self._signed_in(principal)

    def send(self, message: bytes) -> bool:
        if self.closed or not self.sock.send(message):
            return False
        self.last_write = self.gw.ticker.now
        self.gw.metrics.bytes_out += len(message)
        return True

    def send_all(self, messages: list[bytes]) -> bool:
        """``send`` each of ``messages``, in one write to the socket."""
        if self.closed or not self.sock.send_all(messages):
            return False
        self.last_write = self.gw.ticker.now
        self.gw.metrics.bytes_out += sum(len(m) for m in messages)
        return True

    def reply(self, message: bytes) -> None:
        """Write one of the session's own answers (``authenticated``, ``published``, an error).

        They count against the subscriber buffer as a subscription's frames do: a client that
        sends and never reads is cut off once that many wait unsent behind what it has not
        taken, rather than growing the write buffer for as long as the send timeout allows.
        """
        if self.sock.unsent:
            self.unread += 1
            if self.unread > self.gw.settings.subscriber_buffer:
                # Closed at once: a client that takes nothing will not take the close either.
                self.sock.close(*CLOSE_SLOW_READER, wait=0)
                return
        else:
            self.unread = 1
        self.send(message)

    # The socket's handler.

    def received(self, data: bytes) -> None:
        if self.closed:
            return
        inbox = self._inbox
        if inbox is None:
            inbox = self._inbox = deque()
        inbox.append(data)
        if len(inbox) == INBOX_LIMIT:
            self.sock.pause_reading()
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._drain())
            self._task.add_done_callback(log_failure)

    def gone(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.gw.ticker.remove(self)
        self._inbox = None
        task, self._task = self._task, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()
        for sender in list(self.senders.values()):
            sender.finish()
        self.gw.admission.release(self.slot)

    # The ticker's stream.

    def tick(self, now: float, wall: float, heartbeat: float) -> None:
        if self.closed:
            return
        if self.principal is None and now >= self.auth_deadline:
            self._close_unauthorized(
                Unauthorized("send an auth message with a token first.", code="token_missing")
            )
        elif self.principal is not None and wall >= self.principal.expires_at:
            self._close_unauthorized(Unauthorized(
                "the token expired; reconnect with a new one, or refresh it before it does.",
                code="token_expired",
            ))  # fmt: skip
        elif now - self.last_write >= heartbeat:
            self.send(frames.WS_HEARTBEAT)
        self.sock.tick(now)

    def exit(self) -> None:
        """The server is shutting down: close with 1012, the client reconnects elsewhere."""
        self.sock.close(CLOSE_SERVICE_RESTART, "server shutting down")

    # Client messages.

    async def _drain(self) -> None:
        try:
            while self._inbox and not self.closed and not self.sock.closing:
                data = self._inbox.popleft()
                if len(self._inbox) == INBOX_LIMIT - 1:
                    self.sock.resume_reading()
                await self._handle(data)
        finally:
            if self._task is asyncio.current_task():
                self._task = None
                if not self._inbox:
                    self._inbox = None

    def _close_unauthorized(self, exc: GatewayError, code: int = CLOSE_UNAUTHORIZED) -> None:
        self.send(frames.ws_error(exc.code, exc.message))
        # A socket that never signed in is dropped soon whether or not its client answers the
        # close: it holds a place in the small budget of those waiting to sign in.
        wait = UNAUTHENTICATED_CLOSE_SECONDS if self.principal is None else None
        self.sock.close(code, exc.code, wait=wait)
        self._inbox = None  # nothing the client sent after this is looked at

    async def _authenticate(self, token: str) -> None:
        principal = await self.gw.auth.verify(token)
        if self.principal is not None and principal.subject != self.principal.subject:
            raise Unauthorized(
                f"a refreshed token must be for {self.principal.subject!r}, not "
                f"{principal.subject!r}; open another socket for another user.",
                code="subject_changed",
            )
        if self.principal is None:
            try:
                self.gw.admission.sign_in(self.slot, principal.subject)
            except GatewayError as exc:  # a budget of signed-in connections is spent
                self._close_unauthorized(exc, CLOSE_TRY_AGAIN_LATER)
                return
        self._signed_in(principal)

    def _signed_in(self, principal: Principal) -> None:
        self.principal = principal
        self.reply(frames.ws_message(
            "authenticated", subject=principal.subject, expires_at=int(principal.expires_at)
        ))  # fmt: skip

    async def _handle(self, data: bytes) -> None:
        req: str | None = None
        msg: Any = None
        try:
            try:
                msg = orjson.loads(data)
            except orjson.JSONDecodeError:
                raise BadRequest(
                    "a message must be a JSON object.", code="invalid_message"
                ) from None
            if not isinstance(msg, dict):
                raise BadRequest("a message must be a JSON object.", code="invalid_message")
            req = msg.get("req") if isinstance(msg.get("req"), str) else None
            kind = msg.get("type")
            if kind == "auth":
                token = msg.get("token")
                if not isinstance(token, str):
                    raise BadRequest("'token' must be a string.", code="invalid_message")
                try:
                    await self._authenticate(token)
                except Unauthorized as exc:
                    if self.principal is not None:
                        raise  # a refused refresh: the socket keeps its current token
                    # Never signed in: refuse the socket now rather than at the auth deadline,
                    # so nothing already sent after the auth message is even looked at.
                    self._close_unauthorized(exc)
                return
            if self.principal is None:
                raise Unauthorized("send an auth message with a token first.", code="token_missing")
            if kind == "subscribe":
                self._subscribe(msg)
            elif kind == "unsubscribe":
                self._unsubscribe(_ident(msg, "sub"))
            elif kind == "publish":
                await self._publish(msg, req)
            elif kind == "wait":
                self._wait(msg)
            else:
                raise BadRequest(
                    f"unknown message type {kind!r}; use auth, subscribe, unsubscribe, publish "
                    "or wait.",
                    code="invalid_message",
                )
        except (RedisError, StoreMismatch) as exc:
            log.warning("a publish on a WebSocket could not reach the store: %s", exc)
            message = (exc.message if isinstance(exc, StoreMismatch)
                       else "the store is unreachable; try again shortly.")  # fmt: skip
            code = "store_mismatch" if isinstance(exc, StoreMismatch) else "store_unavailable"
            self.reply(frames.ws_error(code, message, req=req))
        except GatewayError as exc:
            # An error of a wait message is the socket's: its subscription stays open.
            sub = msg.get("sub") if isinstance(msg, dict) and msg.get("type") != "wait" else None
            self.reply(frames.ws_error(
                exc.code, exc.message, sub=sub if isinstance(sub, str) else None, req=req,
                **exc.extra,
            ))  # fmt: skip

    def _subscribe(self, msg: dict[str, Any]) -> None:
        assert self.principal is not None
        sub_id = _ident(msg, "sub")
        members = msg.get("members")
        view, key, prefix = msg.get("view"), msg.get("key"), msg.get("prefix")
        if members is None and (not isinstance(view, str) or (key is None) == (prefix is None)):
            raise BadRequest(
                "a subscription names a 'view' and either a 'key' or a 'prefix', as strings "
                "(or, for a group, its 'members').",
                code="invalid_message",
            )
        if sub_id in self.senders:
            raise BadRequest(f"subscription {sub_id!r} is already open.", code="sub_in_use")
        limit = self.gw.settings.max_subscriptions_per_socket
        size = len(members) if isinstance(members, list) else 1
        if self._open() + size > limit:
            raise Unavailable(
                f"a socket holds at most {limit} subscriptions, a group's members each counted;"
                " unsubscribe or open another.",
                code="too_many_subscriptions",
            )
        self.principal.require(READ)
        sub: Subscription | Group
        if members is not None:
            sub = self._group(sub_id, msg, members)
        else:
            raw = msg.get("last_event_id")
            if raw is not None and not isinstance(raw, str):
                raise BadRequest("'last_event_id' must be a string.", code="invalid_last_event_id")
            assert isinstance(view, str)  # checked above
            sub = self._subscription(msg, view, key, prefix, raw or None)
        sender = WsSender(self, sub_id, sub, self.gw.ticker, self.gw.metrics,
                          self.gw.settings.send_timeout_seconds)  # fmt: skip
        self.senders[sub_id] = sender
        sender.woken()

    def _open(self) -> int:
        """The subscriptions the socket holds, each member of a group counted."""
        return sum(len(s.sub.members) if isinstance(s.sub, Group) else 1
                   for s in self.senders.values())  # fmt: skip

    def _group(self, group_id: str, msg: dict[str, Any], members: Any) -> Group:
        """A group of key subscriptions released together (docs/PROTOCOL.md, section 5.3)."""
        assert self.principal is not None
        if msg.get("view") is not None or msg.get("key") is not None or msg.get("prefix"):
            raise BadRequest("a group names its 'members' only: each has its view and key.",
                             code="invalid_message")  # fmt: skip
        if not isinstance(members, list) or not 1 <= len(members) <= MAX_GROUP_MEMBERS:
            raise BadRequest(
                f"a group's 'members' is a list of 1 to {MAX_GROUP_MEMBERS} subscriptions "
                '{"sub", "view", "key", "last_event_id"?}.',
                code="invalid_message",
            )
        parsed: list[tuple[str, str, str, EventId | None]] = []
        for member in members:
            if not isinstance(member, dict):
                raise BadRequest("each member of a group is an object "
                                 '{"sub", "view", "key", "last_event_id"?}.',
                                 code="invalid_message")  # fmt: skip
            sub, view, key = _ident(member, "sub"), member.get("view"), member.get("key")
            if not isinstance(view, str) or not isinstance(key, str):
                raise BadRequest(
                    f"member {sub!r} of the group names a 'view' and a 'key', as strings: a "
                    "group holds key subscriptions (no prefix, window or filter yet).",
                    code="invalid_message",
                )
            if any(sub == p[0] for p in parsed):
                raise BadRequest(f"the group names member {sub!r} twice.", code="invalid_message")
            raw = member.get("last_event_id")
            if raw is not None and not isinstance(raw, str):
                raise BadRequest(f"member {sub!r}'s 'last_event_id' must be a string.",
                                 code="invalid_last_event_id")  # fmt: skip
            self.gw.readable_view(self.principal, view, key)
            parsed.append((sub, view, key, EventId.parse(raw) if raw else None))
        return Group(self.gw.source, self.gw.cuts, group_id, parsed)

    def _subscription(
        self, msg: dict[str, Any], view: str, key: Any, prefix: Any, raw: str | None
    ) -> Subscription:
        """A key's subscription, a window of a key's (``limit``), or a prefix's."""
        assert self.principal is not None
        limit, after, where = msg.get("limit"), msg.get("after"), msg.get("filter")
        if prefix is not None:
            if not isinstance(prefix, str) or limit is not None or after is not None:
                raise BadRequest(
                    "a prefix subscription takes a 'prefix' string and no 'limit' or 'after'.",
                    code="invalid_message",
                )
            checked = filters.parse(where) if where is not None else None
            return prefix_subscription(self.gw, self.principal, view, prefix, raw, checked)
        if where is not None:
            raise BadRequest(
                "a 'filter' goes with a 'prefix' subscription (an empty prefix: the whole "
                "view), not with a key's.",
                code="invalid_message",
            )
        if not isinstance(key, str):
            raise BadRequest("'key' must be a string.", code="invalid_message")
        if limit is None:
            if after is not None:
                raise BadRequest("'after' goes with 'limit' only.", code="invalid_message")
            self.gw.readable_view(self.principal, view, key)
            return Subscription(self.gw.source, view, key, EventId.parse(raw) if raw else None)
        if isinstance(limit, bool) or not isinstance(limit, int):
            raise BadRequest("'limit' must be a whole number of rows.", code="invalid_message")
        rank = None
        if after is not None:
            if not isinstance(after, dict):
                raise BadRequest("'after' must be an object {score, row}.", code="invalid_message")
            rank = after_rank(after.get("score"), after.get("row"), "invalid_message")
        return window_subscription(self.gw, self.principal, view, key, limit, rank, raw)

    def _unsubscribe(self, sub_id: str) -> None:
        sender = self.senders.get(sub_id)
        if sender is None:
            raise BadRequest(
                f"there is no open subscription {sub_id!r}.", code="unknown_subscription"
            )
        sender.finish()
        self.reply(frames.ws_message("unsubscribed", sub=sub_id))

    def _wait(self, msg: dict[str, Any]) -> None:
        """The client waits for a subscription's view to reflect some offsets (read-your-writes):
        its next ``progress`` frame goes out as soon as a frontier that covers them is read."""
        sub_id = _ident(msg, "sub")
        wanted = wanted_offsets(msg.get("offsets"))
        sender = self.senders.get(sub_id)
        if sender is not None:  # one that ended meanwhile needs no frontier: nothing to answer
            sender.sub.wait_for(wanted)

    async def _publish(self, msg: dict[str, Any], req: str | None) -> None:
        assert self.principal is not None
        if req is None:
            raise BadRequest("a publish message needs a 'req' id string.", code="invalid_message")
        self.principal.require(PUBLISH)
        raws = events_of(msg.get("events"), self.gw.settings.max_batch_events)
        key = msg.get("idempotency_key")
        if key is not None and not isinstance(key, str):
            raise BadRequest(
                "a publish message's 'idempotency_key' is a string of 1 to 200 visible ASCII "
                "characters, such as a UUID.",
                code="invalid_idempotency_key",
            )
        offsets = await self.gw.publisher.publish(self.principal, raws, key)
        self.gw.metrics.events_published += len(offsets)
        self.reply(frames.ws_message(
            "published", req=req, offsets=[offset_dict(o) for o in offsets]
        ))  # fmt: skip


async def socket(websocket: WebSocket) -> None:
    gw: Gateway = websocket.app.state.gateway
    if by_cookie(websocket):
        try:
            check_origin(websocket, gw.auth.origins)
        except Forbidden:
            # Closing before accepting answers the handshake 403. (A denial response with a
            # body would make uvicorn's sans-I/O protocol log an error for each refusal.)
            await websocket.close()
            return
    await websocket.accept()
    # A token in the handshake signs the socket in at once, and it takes a connection slot;
    # without one it waits in the budget of sockets not signed in yet
    # (``liveviews.gateway.admission``).
    try:
        token = token_from(websocket)
        principal = await gw.auth.verify(token) if token is not None else None
        if principal is not None:
            refuse_service_by_cookie(websocket, principal)
    except (Unauthorized, Forbidden) as exc:
        await _refuse(websocket, exc, CLOSE_UNAUTHORIZED)
        return
    except Unavailable as exc:  # the identity provider's keys cannot be read just now
        await _refuse(websocket, exc, CLOSE_TRY_AGAIN_LATER)
        return
    subject = principal.subject if principal is not None else None
    try:
        slot = gw.admission.admit("ws", subject, client_address(websocket.scope))
    except GatewayError as exc:
        await _refuse(websocket, exc, CLOSE_TRY_AGAIN_LATER)
        return
    owned = _own_connection(websocket, gw)
    if owned is not None:
        conn = Session(gw, owned, slot)
        owned.handler = conn
        conn.open(principal)
        return  # the socket lives on as its connection's protocol, with no task

    asgi = AsgiSocket(websocket, gw.settings.send_timeout_seconds)
    conn = Session(gw, asgi, slot)
    conn.open(principal)

    async def rest(receive: Receive, send: Send) -> None:
        try:
            await asgi.run(conn)
        finally:
            conn.gone()

    # The socket's life, mostly waiting, is held by the application's outermost call.
    await hand_over(websocket.scope, rest, websocket.receive, websocket.send)


async def _refuse(websocket: WebSocket, exc: GatewayError, code: int) -> None:
    await websocket.send_text(frames.ws_error(exc.code, exc.message).decode())
    await websocket.close(code, exc.code)


def _own_connection(websocket: WebSocket, gw: Gateway) -> OwnedSocket | None:
    """Make the socket its connection's owner, if its server lets it
    (``liveviews.gateway._uvicorn``)."""
    protocol = websocket_protocol(websocket.scope)
    if protocol is None:
        return None
    settings = gw.settings
    now = time.monotonic()

    def build(transport: Any, connections: set[Any]) -> OwnedSocket:
        return OwnedSocket(
            transport, connections, settings.max_body_bytes, settings.heartbeat_seconds,
            settings.send_timeout_seconds, settings.send_timeout_seconds, now,
        )  # fmt: skip

    sock = protocol.release(build)
    assert sock is None or isinstance(sock, OwnedSocket)
    return sock
