"""One task per process for every live sender and socket: heartbeats, token expiry, lost
connections, and the end of every stream when the server shuts down.

On shutdown (uvicorn's ``should_exit``, set by SIGTERM or Ctrl-C) every stream is closed at once,
cleanly and between frames, as sse-starlette closes its own: the client resumes elsewhere with
the ``Last-Event-ID`` of the last frame it got. uvicorn waits for open connections before it
runs the lifespan's shutdown, so the lifespan is too late to notice; a stream left open would
hold the process until ``timeout_graceful_shutdown`` and then be cut off mid-stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Protocol

from liveviews.gateway._uvicorn import serving_server
from liveviews.gateway.metrics import Metrics

TICK_SLICES = 10
"""Each turn of the ticker looks at a tenth of the streams, a tenth of its interval apart: one
pass over 5k streams held the event loop for milliseconds, late for every delivery meanwhile."""
EXIT_POLL_SECONDS = 0.1
"""How often the ticker looks at the server's ``should_exit`` (uvicorn's own loop does too)."""


class Ticked(Protocol):
    """What the ticker looks after: an SSE sender, or a WebSocket session
    (``liveviews.gateway.api.sessions.Session``)."""

    def tick(self, now: float, wall: float, heartbeat: float) -> None:
        """Heartbeat, token expiry and connection checks at ``now`` (monotonic), ``wall``."""

    def exit(self) -> None:
        """The server is shutting down: end now."""


class Ticker:
    """One task for all streams and sockets of a process: heartbeats, token expiry, lost
    connections; and one that ends them all when the server shuts down."""

    def __init__(self, heartbeat: float, metrics: Metrics) -> None:
        self.heartbeat = heartbeat
        self.interval = min(1.0, heartbeat / 2)
        self.metrics = metrics
        self.streams: set[Ticked] = set()
        self.now = time.monotonic()
        self.exiting = False
        """The server is shutting down: every stream ends, those opened later at once."""
        self._task: asyncio.Task[None] | None = None
        self._exit_watch: asyncio.Task[None] | None = None

    def add(self, stream: Ticked) -> None:
        if not self.streams:
            self.now = time.monotonic()  # not ticked while there was nothing to tick
        self.streams.add(stream)
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="liveviews-sse-ticker")
        if not self.exiting and (self._exit_watch is None or self._exit_watch.done()):
            self._exit_watch = asyncio.create_task(self._watch_exit(), name="liveviews-sse-exit")

    def remove(self, stream: Ticked) -> None:
        self.streams.discard(stream)

    async def stop(self) -> None:
        tasks, self._task, self._exit_watch = (self._task, self._exit_watch), None, None
        for task in tasks:
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    def shut_down(self) -> None:
        """End every stream now, and every stream added from now on."""
        if self.exiting:
            return
        self.exiting = True
        for stream in list(self.streams):
            stream.exit()

    async def _run(self) -> None:
        while self.streams:
            streams = list(self.streams)
            size = -(-len(streams) // TICK_SLICES)
            for start in range(0, TICK_SLICES * size, size):
                await asyncio.sleep(self.interval / TICK_SLICES)
                self._tick(streams[start : start + size], time.monotonic(), time.time())

    async def _watch_exit(self) -> None:
        # Looked up on each poll: a process may serve again after a server has stopped.
        while self.streams:
            server = serving_server()
            if server is not None and server.should_exit:
                self.shut_down()
                return
            await asyncio.sleep(EXIT_POLL_SECONDS)

    def tick(self, now: float, wall: float) -> None:
        self._tick(list(self.streams), now, wall)

    def _tick(self, streams: list[Ticked], now: float, wall: float) -> None:
        self.now = now
        for stream in streams:
            if stream in self.streams:  # not one that ended since the turn began
                stream.tick(now, wall, self.heartbeat)
