"""``/v1/ws``: many subscriptions, publishing and token refresh on one WebSocket.

Client messages are JSON objects with a ``type``: ``auth``, ``subscribe``, ``unsubscribe``,
``publish``. Each subscription runs as its own task with its own resume position and sends
the same frames as SSE, tagged with the client's subscription id; all sends go through one
lock, one message at a time. docs/PROTOCOL.md describes the messages and close codes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

import orjson
from redis.exceptions import RedisError
from starlette.types import Receive, Send
from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState

from server import frames, livestream
from server.auth import PUBLISH, READ, Principal, token_from
from server.errors import BadRequest, GatewayError, SlowConsumer, Unauthorized, Unavailable
from server.eventid import EventId
from server.gateway import Gateway
from server.publish import events_of, offset_dict, publish
from server.subscription import Subscription

log = logging.getLogger("liveviews.gateway.ws")

CLOSE_UNAUTHORIZED = 4401
CLOSE_TRY_AGAIN_LATER = 1013
MAX_ID_LENGTH = 64


class SendTimeout(Exception):
    """The client did not take a message within the send timeout."""


def _ident(msg: dict[str, Any], name: str) -> str:
    value = msg.get(name)
    if not isinstance(value, str) or not 1 <= len(value) <= MAX_ID_LENGTH:
        raise BadRequest(
            f"{name!r} must be a string of 1 to {MAX_ID_LENGTH} characters.", code="invalid_message"
        )
    return value


class Connection:
    """One open socket: its principal, its subscriptions, and its one writer lock."""

    def __init__(self, websocket: WebSocket, gw: Gateway) -> None:
        self.ws = websocket
        self.gw = gw
        self.principal: Principal | None = None
        self.subscriptions: dict[str, asyncio.Task[None]] = {}
        self.send_lock = asyncio.Lock()

    async def send(self, message: bytes) -> None:
        async with self.send_lock:
            if self.ws.application_state is WebSocketState.DISCONNECTED:
                # Closed on a send timeout while the peer has not taken the close yet.
                raise WebSocketDisconnect(1008, "send timeout")
            try:
                async with asyncio.timeout(self.gw.settings.send_timeout_seconds):
                    # Text messages: every frame is JSON, and browsers hand text over as strings.
                    await self.ws.send_text(message.decode())
            except TimeoutError:
                raise SendTimeout from None
        self.gw.metrics.bytes_out += len(message)

    async def run(self) -> None:
        settings = self.gw.settings
        token = None
        try:
            token = token_from(self.ws)
            if token is not None:
                await self._authenticate(token)
        except Unauthorized as exc:
            await self._close_unauthorized(exc)
            return
        auth_deadline = time.time() + settings.ws_auth_timeout_seconds
        while True:
            now = time.time()
            deadline = self.principal.expires_at if self.principal else auth_deadline
            if now >= deadline:
                code = "token_expired" if self.principal else "token_missing"
                await self._close_unauthorized(Unauthorized(
                    "the token expired; reconnect with a new one, or refresh it before it does."
                    if self.principal else "send an auth message with a token first.",
                    code=code,
                ))  # fmt: skip
                return
            try:
                async with asyncio.timeout(min(deadline - now, settings.heartbeat_seconds)):
                    message = await self.ws.receive()
            except TimeoutError:
                if time.time() < deadline:
                    await self.send(frames.WS_HEARTBEAT)
                continue
            if message["type"] == "websocket.disconnect":
                return
            text = message.get("text")
            if text is None:
                text = (message.get("bytes") or b"").decode("utf-8", "replace")
            await self._handle(text)

    async def _close_unauthorized(self, exc: GatewayError) -> None:
        with contextlib.suppress(Exception):
            await self.send(frames.ws_error(exc.code, exc.message))
            await self.ws.close(CLOSE_UNAUTHORIZED, exc.code)

    async def _authenticate(self, token: str) -> None:
        principal = self.gw.auth.verify(token)
        if self.principal is not None and principal.subject != self.principal.subject:
            raise Unauthorized(
                f"a refreshed token must be for {self.principal.subject!r}, not "
                f"{principal.subject!r}; open another socket for another user.",
                code="subject_changed",
            )
        self.principal = principal
        await self.send(frames.ws_message(
            "authenticated", subject=principal.subject, expires_at=int(principal.expires_at)
        ))  # fmt: skip

    async def _handle(self, text: str) -> None:
        req: str | None = None
        msg: Any = None
        try:
            try:
                msg = orjson.loads(text)
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
                    await self._close_unauthorized(exc)
                    raise WebSocketDisconnect(CLOSE_UNAUTHORIZED, exc.code) from None
                return
            if self.principal is None:
                raise Unauthorized("send an auth message with a token first.", code="token_missing")
            if kind == "subscribe":
                self._subscribe(msg)
            elif kind == "unsubscribe":
                await self._unsubscribe(_ident(msg, "sub"))
            elif kind == "publish":
                await self._publish(msg, req)
            else:
                raise BadRequest(
                    f"unknown message type {kind!r}; use auth, subscribe, unsubscribe or publish.",
                    code="invalid_message",
                )
        except GatewayError as exc:
            sub = msg.get("sub") if isinstance(msg, dict) else None
            await self.send(frames.ws_error(
                exc.code, exc.message, sub=sub if isinstance(sub, str) else None, req=req,
                **exc.extra,
            ))  # fmt: skip

    def _subscribe(self, msg: dict[str, Any]) -> None:
        assert self.principal is not None
        sub_id = _ident(msg, "sub")
        view, key = msg.get("view"), msg.get("key")
        if not isinstance(view, str) or not isinstance(key, str):
            raise BadRequest("'view' and 'key' must be strings.", code="invalid_message")
        if sub_id in self.subscriptions:
            raise BadRequest(f"subscription {sub_id!r} is already open.", code="sub_in_use")
        limit = self.gw.settings.max_subscriptions_per_socket
        if len(self.subscriptions) >= limit:
            raise Unavailable(
                f"a socket holds at most {limit} subscriptions; unsubscribe or open another.",
                code="too_many_subscriptions",
            )
        self.principal.require(READ)
        self.gw.readable_view(self.principal, view, key)
        raw = msg.get("last_event_id")
        if raw is not None and not isinstance(raw, str):
            raise BadRequest("'last_event_id' must be a string.", code="invalid_last_event_id")
        resume = EventId.parse(raw) if raw else None
        sub = Subscription(self.gw.source, view, key, resume)
        task = asyncio.create_task(self._serve(sub_id, sub))
        task.add_done_callback(_log_failure)
        self.subscriptions[sub_id] = task

    async def _serve(self, sub_id: str, sub: Subscription) -> None:
        try:
            try:
                out = await sub.start()
                while True:
                    await self._send_frames(sub_id, out)
                    out.clear()  # a snapshot can be large: do not keep it while waiting
                    await sub.wait()
                    out = await sub.next_frames()
            except SlowConsumer as exc:
                await self.send(frames.ws_error(
                    exc.code, exc.message, sub=sub_id, last_event_id=sub.last_event_id
                ))  # fmt: skip
            except GatewayError as exc:
                await self.send(frames.ws_error(exc.code, exc.message, sub=sub_id, **exc.extra))
            except RedisError:
                log.warning("subscription %s failed to read the store", sub_id, exc_info=True)
                await self.send(frames.ws_error(
                    "store_unavailable", "the store could not be read; resume shortly.",
                    sub=sub_id, last_event_id=sub.last_event_id,
                ))  # fmt: skip
        except SendTimeout:
            with contextlib.suppress(Exception):
                await self.ws.close(1008, "send timeout")
        finally:
            sub.close()
            if self.subscriptions.get(sub_id) is asyncio.current_task():
                del self.subscriptions[sub_id]

    async def _send_frames(self, sub_id: str, out: list[frames.Frame]) -> None:
        metrics = self.gw.metrics
        for f in out:
            await self.send(f.ws(sub_id))
            metrics.frames_out += 1
            if f.event == frames.DELTA:
                metrics.deltas_out += 1

    async def _unsubscribe(self, sub_id: str) -> None:
        task = self.subscriptions.pop(sub_id, None)
        if task is None:
            raise BadRequest(
                f"there is no open subscription {sub_id!r}.", code="unknown_subscription"
            )
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await self.send(frames.ws_message("unsubscribed", sub=sub_id))

    async def _publish(self, msg: dict[str, Any], req: str | None) -> None:
        assert self.principal is not None
        if req is None:
            raise BadRequest("a publish message needs a 'req' id string.", code="invalid_message")
        self.principal.require(PUBLISH)
        raws = events_of(msg.get("events"), self.gw.settings.max_batch_events)
        offsets = await publish(
            self.gw.client, self.gw.app, self.gw.settings.store.log_partitions, self.principal, raws
        )
        self.gw.metrics.events_published += len(offsets)
        await self.send(frames.ws_message(
            "published", req=req, offsets=[offset_dict(o) for o in offsets]
        ))  # fmt: skip

    async def close(self) -> None:
        tasks = list(self.subscriptions.values())
        self.subscriptions.clear()
        for task in tasks:
            task.cancel()
        # A subscription that failed on a closed socket has nothing more to say; if this task
        # itself is cancelled, gather raises CancelledError and it propagates.
        await asyncio.gather(*tasks, return_exceptions=True)


def _log_failure(task: asyncio.Task[None]) -> None:
    if task.cancelled():
        return
    exc = task.exception()
    if exc is not None and not isinstance(exc, (WebSocketDisconnect, RuntimeError, OSError)):
        log.error("a subscription failed", exc_info=exc)


async def socket(websocket: WebSocket) -> None:
    gw: Gateway = websocket.app.state.gateway
    await websocket.accept()
    try:
        gw.admit("ws")
    except Unavailable as exc:
        await websocket.send_text(frames.ws_error(exc.code, exc.message).decode())
        await websocket.close(CLOSE_TRY_AGAIN_LATER, exc.code)
        return
    conn = Connection(websocket, gw)

    async def rest(receive: Receive, send: Send) -> None:
        try:
            await conn.run()
        except (WebSocketDisconnect, SendTimeout):
            pass
        finally:
            await conn.close()
            gw.release("ws")

    # The socket's life, mostly waiting, is held by the application's outermost call.
    await livestream.hand_over(websocket.scope, rest, websocket.receive, websocket.send)
