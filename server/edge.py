"""The gateway's TCP edge: time limits uvicorn does not enforce on its own.

uvicorn's HTTP protocol arms no timer while a request's headers are still arriving, so a
client that connects and sends nothing, or trickles header lines forever (slowloris), holds a
socket and a file descriptor indefinitely. And closing a transport waits until its write buffer
is flushed, so a connection closed because its peer stopped reading (send timeout, slow
consumer, WebSocket ping timeout) keeps its file descriptor for as long as the peer stays
silent. ``http_protocol`` returns uvicorn's httptools protocol with both bounded:

- the headers of a request must be complete within ``header_timeout`` seconds of the
  connection being made (or of the previous response on a kept-alive connection);
- a transport that is closed with data still unsent is aborted (RST) after ``linger``
  seconds if the peer has not taken the data by then.

The WebSocket protocol of an upgraded connection runs on the same transport, so it gets the
same closing rule. A long-lived response can also ask the transport to call it back when the
connection is lost (``LingeringTransport.on_lost``), instead of keeping a task per connection
waiting on ASGI's ``receive`` for the disconnect.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol


class LingeringTransport:
    """A transport whose ``close()`` gives up on unsent data after ``linger`` seconds, and
    that calls back whoever asked (``on_lost``) when the connection is lost."""

    def __init__(self, transport: asyncio.Transport, linger: float) -> None:
        self._transport = transport
        self._linger = linger
        self._abort_timer: asyncio.TimerHandle | None = None
        self.lost: Callable[[], None] | None = None

    def on_lost(self, callback: Callable[[], None] | None) -> None:
        """Call ``callback`` once the connection is lost (None: call nothing). A long-lived
        response learns of a disconnect this way without a task waiting on ``receive``."""
        self.lost = callback

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


def http_protocol(header_timeout: float, linger: float) -> type[asyncio.Protocol]:
    """uvicorn's httptools protocol with a header timeout and a bounded close (see above)."""

    class GuardedHttpToolsProtocol(HttpToolsProtocol):
        _header_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(LingeringTransport(transport, linger))  # type: ignore[arg-type]
            self._arm_header_timer()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm_header_timer()
            super().connection_lost(exc)
            transport = self.transport
            if isinstance(transport, LingeringTransport):
                lost, transport.lost = transport.lost, None
                if lost is not None:
                    lost()

        def on_headers_complete(self) -> None:
            self._disarm_header_timer()
            super().on_headers_complete()

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

    return GuardedHttpToolsProtocol
