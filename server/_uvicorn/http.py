"""The gateway's TCP edge: time limits uvicorn does not enforce on its own.

uvicorn's HTTP protocol arms no timer while a request's headers are still arriving, so a
client that connects and sends nothing, or trickles header lines forever (slowloris), holds a
socket and a file descriptor indefinitely. And closing a transport waits until its write buffer
is flushed, so a connection closed because its peer stopped reading (send timeout, slow
consumer, WebSocket ping timeout) keeps its file descriptor for as long as the peer stays
silent. And once a request's headers are in, nothing bounds how long its body takes, so a client
that trickles a body a byte at a time holds its connection (and the request's task) as long as
it likes. ``http_protocol`` returns uvicorn's httptools protocol with all three bounded:

- the headers of a request must be complete within ``header_timeout`` seconds of the
  connection being made (or of the previous response on a kept-alive connection);
- its body must be complete within ``body_timeout`` seconds of its headers: if not, the request
  is answered 408 ``body_timeout`` (or, if its answer has begun, cut off) and the connection
  closed;
- a transport that is closed with data still unsent is aborted (RST) after ``linger``
  seconds if the peer has not taken the data by then.

The WebSocket protocol of an upgraded connection runs on the same transport, so it gets the
same closing rule.

A long-lived response can also take its connection over from the HTTP protocol once its head
has gone out (``LingeringTransport.release``): the response then is the connection's protocol
(``ReleasedConnection``), and neither uvicorn's per-connection state (its parser, the request's
scope, the ASGI cycle and its events) nor a task waits for as long as the response stays open.
uvicorn hands an upgraded WebSocket's transport to another protocol the same way.

An open WebSocket takes its connection over from uvicorn's WebSocket protocol the same way,
once the handshake is done (``WebSocketProtocol.release``): the gateway then frames its
messages itself (``liveviews.gateway.live.sockets``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Protocol

import orjson
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol


class Owner(Protocol):
    """What a response that took its connection over (``LingeringTransport.release``) hears."""

    def lost(self) -> None:
        """The connection is gone."""

    def shutdown(self) -> None:
        """The server is shutting down gracefully: end the response now."""


UNREAD_LIMIT = 65_536
"""Bytes a client may send on a connection whose response took it over before it is cut off."""


class ReleasedConnection(asyncio.Protocol):
    """The protocol of a connection whose response took it over from the HTTP protocol.

    The client has nothing more to say on it (a request pipelined behind a response that does
    not end cannot be answered), so what it sends is read and dropped, up to ``UNREAD_LIMIT``
    bytes; a client that sends more is cut off (RST) rather than read forever. Its end of the
    connection closing closes the transport. The server's graceful shutdown finds it among the
    server's connections, as it found the HTTP protocol.
    """

    __slots__ = ("owner", "connections", "transport", "unread")

    def __init__(self, owner: Owner, connections: set[Any], transport: asyncio.Transport) -> None:
        self.owner = owner
        self.connections = connections
        self.transport = transport
        self.unread = 0

    def data_received(self, data: bytes) -> None:
        self.unread += len(data)
        if self.unread > UNREAD_LIMIT:
            self.transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        self.connections.discard(self)
        self.owner.lost()

    def shutdown(self) -> None:
        self.owner.shutdown()


Releaser = Callable[[Owner], bool]


class LingeringTransport:
    """A transport whose ``close()`` gives up on unsent data after ``linger`` seconds, and that
    a started response can take over from the HTTP protocol (``release``)."""

    __slots__ = ("_transport", "_linger", "_abort_timer", "_releaser")

    def __init__(self, transport: asyncio.Transport, linger: float, releaser: Releaser) -> None:
        self._transport = transport
        self._linger = linger
        self._abort_timer: asyncio.TimerHandle | None = None
        self._releaser: Releaser | None = releaser

    def release(self, owner: Owner) -> bool:
        """Make ``owner`` the connection's owner, if its response has started (chunked) and not
        ended and no request waits behind it; False, and nothing changes, otherwise. From then
        on the HTTP protocol no longer serves the connection: the owner writes the rest of the
        response (and its last chunk) itself and closes the transport when it ends. The ASGI
        application's call may then return at once."""
        if self._releaser is None or not self._releaser(owner):
            return False
        self._releaser = None  # it refers back to the HTTP protocol, which is done with it
        return True

    def close(self) -> None:
        if self._abort_timer is None and not self._transport.is_closing():
            pending = self._transport.get_write_buffer_size() > 0
            self._transport.close()
            if pending:
                loop = asyncio.get_running_loop()
                self._abort_timer = loop.call_later(self._linger, self._transport.abort)
        else:
            self._transport.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


def body_timeout_response(body_timeout: float) -> bytes:
    """The whole answer to a request whose body was too slow, in the gateway's error shape."""
    body = orjson.dumps({
        "code": "body_timeout",
        "message": f"the request body did not arrive within {body_timeout:g} s of its headers; "
                   "send it at once, or send less.",
    })  # fmt: skip
    return (
        b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\n"
        b"content-length: %d\r\nconnection: close\r\n\r\n%b" % (len(body), body)
    )


def http_protocol(
    header_timeout: float, linger: float, body_timeout: float = 10.0
) -> type[asyncio.Protocol]:
    """uvicorn's httptools protocol with header and body timeouts and a bounded close (see
    above)."""
    too_slow = body_timeout_response(body_timeout)

    class GuardedHttpToolsProtocol(HttpToolsProtocol):
        _header_timer: asyncio.TimerHandle | None = None
        _body_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            lingering = LingeringTransport(transport, linger, self._release)
            super().connection_made(lingering)  # type: ignore[arg-type]
            self._arm_header_timer()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm_header_timer()
            self._disarm_body_timer()
            self._unreleasable()
            super().connection_lost(exc)

        def handle_websocket_upgrade(self) -> None:
            self._unreleasable()  # the WebSocket protocol keeps the transport, not this protocol
            super().handle_websocket_upgrade()

        def _unreleasable(self) -> None:
            if isinstance(self.transport, LingeringTransport):
                self.transport._releaser = None

        def _release(self, owner: Owner) -> bool:
            cycle, transport = self.cycle, self.transport
            if (cycle is None or not cycle.response_started or cycle.response_complete
                    or not cycle.chunked_encoding or cycle.disconnected or self.pipeline
                    or transport.is_closing()):  # fmt: skip
                return False
            self._disarm_header_timer()
            # The cycle takes the end of the application's call as that of a lost connection:
            # it writes and closes nothing more. Reading goes on, to the new protocol.
            cycle.disconnected = True
            self.connections.discard(self)
            assert isinstance(transport, LingeringTransport)
            released = ReleasedConnection(owner, self.connections, transport._transport)
            self.connections.add(released)  # type: ignore[arg-type]
            transport._transport.set_protocol(released)
            self.flow.resume_reading()
            self.parser = None  # type: ignore[assignment]  # it refers back to this protocol
            return True

        def on_headers_complete(self) -> None:
            self._disarm_header_timer()
            super().on_headers_complete()
            if not self.parser.should_upgrade():
                # Disarmed when the body is complete: at once, for a request without one.
                self._body_timer = self.loop.call_later(body_timeout, self._body_too_slow)

        def on_message_complete(self) -> None:
            self._disarm_body_timer()
            super().on_message_complete()

        def on_response_complete(self) -> None:
            pipelined = bool(self.pipeline)  # its headers are complete already
            super().on_response_complete()
            if not pipelined and not self.transport.is_closing():
                self._arm_header_timer()  # the next request on a kept-alive connection

        def _arm_header_timer(self) -> None:
            self._disarm_header_timer()
            self._header_timer = self.loop.call_later(header_timeout, self._headers_too_slow)

        def _disarm_header_timer(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _headers_too_slow(self) -> None:
            self._header_timer = None
            if not self.transport.is_closing():
                self.transport.close()

        def _disarm_body_timer(self) -> None:
            if self._body_timer is not None:
                self._body_timer.cancel()
                self._body_timer = None

        def _body_too_slow(self) -> None:
            self._body_timer = None
            cycle, transport = self.cycle, self.transport
            if transport.is_closing():
                return
            if cycle is not None and not cycle.response_started:
                # The application waits for the rest of the body: it hears that the client is
                # gone, and whatever it answers is not written.
                cycle.response_started = True
                transport.write(too_slow)
            transport.close()

    return GuardedHttpToolsProtocol
