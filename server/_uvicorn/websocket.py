"""uvicorn's WebSocket protocol, whose open socket can take its connection over.

Once the handshake is done, an uncompressed socket becomes its connection's own protocol
(``liveviews.gateway.live.sockets.OwnedSocket``): uvicorn's per-socket reader task, queue and
keepalive task go, and an idle socket holds no task at all. What this reaches into (the sans-I/O
protocol's ``conn``, its parser generator and its queue) is listed in
``liveviews.gateway._uvicorn.compat``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol


class _Detached:
    """Where a WebSocket protocol that gave its connection away still ``close``s (no-op)."""

    def close(self) -> None:
        pass

    def is_closing(self) -> bool:
        return True


_DETACHED = _Detached()

Build = Callable[[Any, set[Any]], asyncio.Protocol]
"""Makes a WebSocket's new protocol from its transport and the server's connection set."""


class WebSocketProtocol(WebSocketsSansIOProtocol):
    """uvicorn's WebSocket protocol, whose open socket can take its connection over."""

    def release(self, build: Build) -> asyncio.Protocol | None:
        """Make ``build``'s protocol the connection's, once the handshake is done. None, and
        nothing changes, if the socket is closing, compresses its messages, or uvicorn has read
        any of the client's frames (a message waits in its queue, or a frame is half read)."""
        conn = self.conn
        if (not self.handshake_complete or self.close_sent or self.disconnected
                or self.initial_response is not None or self.transport.is_closing()
                or conn.extensions or self.frames or not self.queue.empty()
                or conn.parser_exc is not None or not _between_frames(conn.parser)):  # fmt: skip
            return None
        self.stop_keepalive()
        transport = self.transport
        self.connections.discard(self)
        new = build(transport, self.connections)
        self.connections.add(new)  # type: ignore[arg-type]
        transport.set_protocol(new)
        # From now on this protocol writes and closes nothing: the application's call ends
        # with the hand-over, and uvicorn closes the transport it knows when it does.
        self.disconnected = True
        self.transport = _DETACHED  # type: ignore[assignment]
        return new


def _between_frames(parser: Any) -> bool:
    """Is websockets' frame parser waiting for a frame's first byte (nothing half-read)?"""
    while (inner := getattr(parser, "gi_yieldfrom", None)) is not None:
        parser = inner
    return getattr(parser, "__name__", "") == "at_eof"
