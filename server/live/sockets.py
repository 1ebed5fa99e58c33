"""An open WebSocket, as the gateway's ``/v1/ws`` session (``liveviews.gateway.api.sessions``)
writes and hears it.

Two kinds, one interface (``Socket``):

- ``OwnedSocket``: under the gateway's uvicorn protocols (``liveviews.gateway._uvicorn``), once the
  handshake is done and the socket's messages are not compressed, the socket takes its
  connection over from uvicorn's WebSocket protocol and is the connection's protocol: RFC
  6455 framing of its own (``liveviews.gateway.wire.rfc6455``), messages written to the connection
  at once, keepalive pings, the send timeout and the closing handshake checked by the process's
  ticker. An idle socket holds no task, timer or buffer.
- ``AsgiSocket``: any other case (permessage-deflate negotiated, another server, client
  bytes uvicorn had already read at the hand-over): the same through ASGI, with a reader and
  a writer task; uvicorn pings.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections import deque
from typing import Any, Protocol

from starlette.websockets import WebSocket, WebSocketDisconnect

from liveviews.gateway.live.writes import socket_fd, write_now
from liveviews.gateway.wire import rfc6455

CLOSE_SEND_TIMEOUT = (rfc6455.CLOSE_POLICY, "send timeout")
FRAMES_PER_CALL = 512
"""Client frames one callback of the loop parses and acts on (~0.1 ms of tiny frames): a
socket's client cannot hold the loop, and every other subscriber, for longer, whatever it sends."""


class Handler(Protocol):
    """What hears a socket: the gateway's session (``liveviews.gateway.api.sessions.Session``)."""

    def received(self, data: bytes) -> None:
        """A complete text or binary message."""

    def gone(self) -> None:
        """The connection is closed; called once."""


class Socket(Protocol):
    """What the gateway's connection writes to."""

    @property
    def closing(self) -> bool:
        """Closed, or closing: nothing more is written."""

    @property
    def unsent(self) -> bool:
        """Does the socket hold written messages the client has not taken yet?"""

    def send(self, payload: bytes) -> bool:
        """Write one text message, never waiting; False if the socket is closing."""

    def send_all(self, payloads: list[bytes]) -> bool:
        """Write each of ``payloads`` as a text message, in order and at once (one system call
        where the socket writes itself); False if the socket is closing."""

    def close(self, code: int, reason: str = "", wait: float | None = None) -> None:
        """Start the closing handshake; nothing more is written after it. The connection is
        closed anyway if the client has not answered within ``wait`` seconds (the send timeout
        if None; 0: at once)."""

    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...

    def tick(self, now: float) -> None:
        """Keepalive, send timeout and closing handshake deadlines, at ``now``."""


class OwnedSocket(asyncio.Protocol):
    """A WebSocket that owns its connection: the connection's protocol since the hand-over.

    Pings go out ``ping_interval`` seconds after the last one was answered; a ping not answered
    within ``ping_timeout`` closes the socket (1011), as does a write buffer that stays above
    the transport's high-water mark for ``send_timeout`` (1008). A closing handshake the
    client does not complete within ``send_timeout`` ends with the connection closed anyway
    (and reset after ``liveviews.gateway._uvicorn.http``'s linger if the client takes nothing more).

    What the client sends is parsed ``FRAMES_PER_CALL`` frames per turn of the event loop at
    most, with reading paused while frames already read wait (``_parse``), and not at all
    while the handler has paused reading.
    """

    __slots__ = ("transport", "connections", "handler", "reader",
                 "ping_interval", "ping_timeout", "send_timeout", "now", "_ping", "_ping_at",
                 "_paused_at", "_close_at", "_fd", "_write_raw", "_is_closing", "_buffered",
                 "_gone", "_held", "_handler_paused", "_reading_paused")  # fmt: skip

    def __init__(
        self, transport: Any, connections: set[Any], max_size: int, ping_interval: float,
        ping_timeout: float, send_timeout: float, now: float,
    ) -> None:  # fmt: skip
        self.transport = transport
        self.connections = connections
        self.handler: Handler | None = None
        self.reader = rfc6455.Reader(max_size)
        self.ping_interval = ping_interval
        self.ping_timeout = ping_timeout
        self.send_timeout = send_timeout
        self.now = now
        self._ping: bytes | None = None
        self._ping_at = now  # when the last ping went out (or the socket opened)
        self._paused_at: float | None = None
        self._close_at: float | None = None
        self._gone = False
        self._held = False  # frames already read wait for the loop's next turn
        self._handler_paused = False  # the handler asked to hear nothing more for now
        self._reading_paused = False  # the transport's reading, paused for either
        # Bound once: the server wraps its transport, and these run on every delivery.
        self._write_raw = transport.write
        self._is_closing = transport.is_closing
        self._buffered = transport.get_write_buffer_size
        self._fd = socket_fd(transport)

    # What the gateway's connection uses (``Socket``).

    @property
    def closing(self) -> bool:
        return self._close_at is not None or self._is_closing()

    @property
    def unsent(self) -> bool:
        return self._buffered() > 0

    def send(self, payload: bytes) -> bool:
        if self.closing:
            return False
        self._write(rfc6455.text(payload))
        return True

    def send_all(self, payloads: list[bytes]) -> bool:
        if self.closing:
            return False
        self._write(b"".join(rfc6455.text(p) for p in payloads))
        return True

    def close(self, code: int, reason: str = "", wait: float | None = None) -> None:
        if self.closing:
            return
        self._write(rfc6455.close(code, reason))
        if wait == 0:
            self.transport.close()
        else:
            self._close_at = self.now + (self.send_timeout if wait is None else wait)

    def pause_reading(self) -> None:
        self._handler_paused = True
        self._pace_reading()

    def resume_reading(self) -> None:
        self._handler_paused = False
        if self.reader.backlog and not self._held:
            self._hold()  # frames read before the pause come first
        self._pace_reading()

    def tick(self, now: float) -> None:
        self.now = now
        if self._is_closing():
            return
        if self._close_at is not None:
            if now >= self._close_at:
                self.transport.close()
        elif self._paused_at is not None and now - self._paused_at >= self.send_timeout:
            self.close(*CLOSE_SEND_TIMEOUT)
        elif self._ping is not None:
            if now - self._ping_at >= self.ping_timeout:
                self.close(rfc6455.CLOSE_INTERNAL_ERROR, "keepalive ping timeout")
        elif self.ping_interval > 0 and now - self._ping_at >= self.ping_interval:
            self._ping = os.urandom(4)
            self._ping_at = now
            self._write(rfc6455.frame(rfc6455.OP_PING, self._ping))

    def _write(self, data: bytes) -> None:
        if self._buffered():
            self._write_raw(data)
        else:
            write_now(self._fd, data, self._write_raw)

    # The connection's protocol.

    def data_received(self, data: bytes) -> None:
        self._parse(data)

    def _parse(self, data: bytes = b"") -> None:
        """Act on the frames of ``data`` and those waiting, ``FRAMES_PER_CALL`` at most: the
        rest wait, with reading paused, until the loop has run its other callbacks."""
        self._held = False
        if self._gone:
            return
        try:
            messages = self.reader.feed(data, FRAMES_PER_CALL)
        except rfc6455.ProtocolError as exc:
            self._fail(exc.code, exc.reason)
            return
        ping: bytes | None = None
        for m in messages:
            if m.opcode in (rfc6455.OP_TEXT, rfc6455.OP_BINARY):
                if self._close_at is None and self.handler is not None:
                    self.handler.received(m.data)
            elif m.opcode == rfc6455.OP_PING:
                ping = m.data
            elif m.opcode == rfc6455.OP_PONG:
                if self._ping is not None and m.data == self._ping:
                    self._ping = None
                    self._ping_at = self.now
            else:  # close
                self._closed_by_client(m.data)
                return
        # RFC 6455 5.5.3: a pong for the latest of several pings is enough; one write per
        # batch keeps a stream of pings from costing a system call each.
        if ping is not None and not self.closing:
            self._write(rfc6455.frame(rfc6455.OP_PONG, ping))
        if self.reader.backlog and not self._handler_paused:
            self._hold()
        self._pace_reading()

    def _hold(self) -> None:
        """Parse the frames already read on the loop's next turn, reading no more till then."""
        self._held = True
        asyncio.get_running_loop().call_soon(self._parse)

    def _pace_reading(self) -> None:
        """Read from the client only while no frame it sent waits and the handler listens."""
        paused = self._held or self._handler_paused or self.reader.backlog
        if paused != self._reading_paused and not self._is_closing():
            self._reading_paused = paused
            if paused:
                self.transport.pause_reading()
            else:
                self.transport.resume_reading()

    def _closed_by_client(self, payload: bytes) -> None:
        if self._close_at is None and not self._is_closing():
            if len(payload) == 1:
                self._write(rfc6455.close(rfc6455.CLOSE_PROTOCOL_ERROR, "invalid close frame"))
            else:
                code = rfc6455.close_code(payload)
                self._write(rfc6455.close(rfc6455.CLOSE_NORMAL if code == 1005 else code))
        self.transport.close()

    def _fail(self, code: int, reason: str) -> None:
        if not self.closing:
            self._write(rfc6455.close(code, reason))
        self.transport.close()

    def pause_writing(self) -> None:
        self._paused_at = self.now

    def resume_writing(self) -> None:
        self._paused_at = None

    def connection_lost(self, exc: Exception | None) -> None:
        self.connections.discard(self)
        if not self._gone:
            self._gone = True
            handler, self.handler = self.handler, None
            if handler is not None:
                handler.gone()

    def shutdown(self) -> None:
        """The server is shutting down gracefully (uvicorn calls each connection's): close now,
        without waiting for the client's half of the closing handshake."""
        self.close(1012, "server shutting down")
        self.transport.close()


class AsgiSocket:
    """A WebSocket served through ASGI: a reader task and a writer task with a queue."""

    def __init__(self, websocket: WebSocket, send_timeout: float) -> None:
        self.ws = websocket
        self.send_timeout = send_timeout
        self._out: deque[bytes | tuple[int, str]] = deque()
        self._ready = asyncio.Event()
        self._closing = False
        self._reading = asyncio.Event()
        self._reading.set()

    @property
    def closing(self) -> bool:
        return self._closing

    @property
    def unsent(self) -> bool:
        return bool(self._out)

    def send(self, payload: bytes) -> bool:
        if self._closing:
            return False
        self._out.append(payload)
        self._ready.set()
        return True

    def send_all(self, payloads: list[bytes]) -> bool:
        if self._closing:
            return False
        self._out.extend(payloads)
        self._ready.set()
        return True

    def close(self, code: int, reason: str = "", wait: float | None = None) -> None:
        # uvicorn runs the closing handshake of a socket served through ASGI.
        if not self._closing:
            self._closing = True
            self._out.append((code, reason))
            self._ready.set()

    def pause_reading(self) -> None:
        self._reading.clear()

    def resume_reading(self) -> None:
        self._reading.set()

    def tick(self, now: float) -> None:
        pass  # uvicorn pings; the writer enforces the send timeout

    async def run(self, handler: Handler) -> None:
        """Serve the socket until it closes; then ``handler.gone()``."""
        writer = asyncio.create_task(self._write_all())
        try:
            while True:
                await self._reading.wait()
                message = await self.ws.receive()
                if message["type"] == "websocket.disconnect":
                    return
                data = message.get("bytes")
                if data is None:
                    data = (message.get("text") or "").encode()
                if not self._closing:
                    handler.received(data)
        except (WebSocketDisconnect, RuntimeError, OSError):
            pass
        finally:
            self._closing = True
            writer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await writer
            handler.gone()

    async def _write_all(self) -> None:
        try:
            while True:
                await self._ready.wait()
                self._ready.clear()
                while self._out:
                    item = self._out[0]
                    if isinstance(item, tuple):
                        await self.ws.close(*item)
                        return
                    try:
                        async with asyncio.timeout(self.send_timeout):
                            await self.ws.send_text(item.decode())
                    except TimeoutError:
                        self._closing = True
                        await self.ws.close(*CLOSE_SEND_TIMEOUT)
                        return
                    self._out.popleft()
        except (WebSocketDisconnect, RuntimeError, OSError):
            self._closing = True
