"""An SSE subscription's response: frames written straight to the connection, no task per stream.

After the first frames, the stream takes its connection over from uvicorn's HTTP protocol
(``server.edge``): the stream is then the connection's owner, and the hub hands each delta and
progress to its ``deliver`` methods, which write the frame's shared, pre-encoded HTTP chunk to
the connection at once: to its socket while the transport holds nothing unsent, else through the
transport, which queues it in order. An idle stream holds no task and none of the HTTP
protocol's per-connection state: what needs it (a reset to read, the end of the stream, a
closed connection) wakes it, and a task runs until the stream is up to date again or has
ended. One ``Ticker`` per process writes heartbeats and notices expired tokens for all streams,
and watches for the server's graceful shutdown.

On shutdown (uvicorn's ``should_exit``, set by SIGTERM or Ctrl-C) every stream is closed at once,
cleanly and between frames, as sse-starlette closes its own: the client resumes elsewhere with
the ``Last-Event-ID`` of the last frame it got. uvicorn waits for open connections before it
runs the lifespan's shutdown, so the lifespan is too late to notice; a stream left open would
hold the process until ``timeout_graceful_shutdown`` and then be cut off mid-stream.

Taking the connection over needs the gateway's HTTP protocol (``server.edge``); under any other
server the stream sends each batch of frames through ASGI instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from starlette.types import Receive, Scope, Send

from server import frames
from server.edge import socket_fd, write_now
from server.errors import SlowConsumer
from server.hub import EpochChanged, FeedRun, Item, Progress, SubscriberState, http_chunk
from server.metrics import Metrics
from server.subscription import Subscription

HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-store"),
    (b"x-accel-buffering", b"no"),
]
HEARTBEAT_CHUNK = http_chunk(frames.SSE_HEARTBEAT)
LAST_CHUNK = b"0\r\n\r\n"
EXIT_POLL_SECONDS = 0.1
"""How often the ticker looks at the server's ``should_exit`` (uvicorn's own loop does too)."""


SERVER_SEND = "liveviews.server_send"
"""The scope key under which the application keeps the server's own ``send`` (``server.app``)."""

HELD = "liveviews.held"
"""The scope key of the list where a started stream leaves the rest of its life for the
application's outermost call (``server.app``), once its response head has gone out through
the framework: the connection then waits in a coroutine of its own, not in the framework's
stack of middleware, routing and exception wrappers (~5 KB per idle stream)."""

Rest = Callable[[Receive, Send], Awaitable[None]]


async def hand_over(scope: Scope, rest: Rest, receive: Receive, send: Send) -> None:
    """Leave ``rest`` of a started response to the application's outermost call, which runs
    it with the server's own ``receive`` and ``send``; or run it here if nothing takes it."""
    held = scope.get(HELD)
    if isinstance(held, list) and not held:
        held.append(rest)
    else:
        await rest(receive, send)


def transport_of(scope: Scope) -> Any | None:
    """The transport under uvicorn's httptools ``send``, once it has chosen chunked encoding."""
    cycle = getattr(scope.get(SERVER_SEND), "__self__", None)
    if type(cycle).__module__ != "uvicorn.protocols.http.httptools_impl":
        return None
    if not getattr(cycle, "chunked_encoding", False):
        return None
    return getattr(cycle, "transport", None)


def serving_server() -> Any | None:
    """The uvicorn server that serves this process, found as sse-starlette finds it.

    uvicorn installs its bound ``handle_exit`` as the SIGTERM handler while it serves (from the
    main thread only); its ``should_exit`` turns true when a graceful shutdown begins.
    """
    server = getattr(signal.getsignal(signal.SIGTERM), "__self__", None)
    return server if hasattr(server, "should_exit") else None


class Ticked(Protocol):
    """A stream the ticker looks after: an SSE stream, or a WebSocket (``server.ws``)."""

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
            await asyncio.sleep(self.interval)
            self.tick(time.monotonic(), time.time())

    async def _watch_exit(self) -> None:
        # Looked up on each poll: a process may serve again after a server has stopped.
        while self.streams:
            server = serving_server()
            if server is not None and server.should_exit:
                self.shut_down()
                return
            await asyncio.sleep(EXIT_POLL_SECONDS)

    def tick(self, now: float, wall: float) -> None:
        self.now = now
        for stream in list(self.streams):
            stream.tick(now, wall, self.heartbeat)


log = logging.getLogger("liveviews.gateway.sse")


class LiveStream:
    """One SSE subscription that owns its connection: the hub's sink for it, and the owner
    (``server.edge.Owner``) of its connection once the HTTP protocol has released it."""

    __slots__ = ("sub", "transport", "ticker", "metrics", "expires_at", "last_write", "pending",
                 "fd", "_write_raw", "is_closing", "_buffered", "_end", "_running",
                 "_task")  # fmt: skip

    def __init__(
        self, sub: Subscription, transport: Any, ticker: Ticker, metrics: Metrics,
        expires_at: float, end: Callable[[], None],
    ) -> None:  # fmt: skip
        self.sub = sub
        self.transport = transport
        self.ticker = ticker
        self.metrics = metrics
        self.expires_at = expires_at
        self.last_write = ticker.now
        self.pending = 0  # frames written since the transport's buffer was last seen empty
        self._end: Callable[[], None] | None = end
        """Called once, when the stream has ended (None since)."""
        self._running = False
        self._task: asyncio.Task[None] | None = None
        # Bound once: the server may wrap its transport, and these run on every delivery.
        self._write_raw = transport.write
        self.is_closing: Callable[[], bool] = transport.is_closing
        self._buffered = transport.get_write_buffer_size
        self.fd = socket_fd(transport)
        """The socket's descriptor (-1 if none), written to while the transport holds nothing."""

    def _write(self, chunk: bytes, count: int = 1) -> bool:
        """Write ``chunk``, which counts as ``count`` frames against the subscriber buffer while
        the client has not taken what was written; False if the client does not keep up."""
        if self.is_closing():
            return False
        if self._buffered():
            self.pending += count
            subscriber = self.sub.subscriber
            assert subscriber is not None
            if self.pending > subscriber.capacity:
                return False  # the client does not read: the slow-consumer policy applies
            self._write_raw(chunk)
        else:
            self.pending = count
            write_now(self.fd, chunk, self._write_raw)
        self.last_write = self.ticker.now
        self.metrics.bytes_out += len(chunk)
        return True

    def writes_at_once(self) -> bool:
        """Does the stream write straight to its socket, with nothing queued on its transport,
        and the hub hands it its items (it may join its key's cohort, ``server.cohort``)?"""
        subscriber = self.sub.subscriber
        return (
            self.fd >= 0
            and self._end is not None
            and not self._running
            and subscriber is not None
            and subscriber.sink is self
            and not self.is_closing()
            and not self._buffered()
        )

    def queue(self, rest: bytes) -> None:
        """Queue ``rest`` of a chunk whose start the socket took (``server.cohort``)."""
        self._write_raw(rest)

    def deliver(self, item: Item) -> bool:
        if isinstance(item, EpochChanged):
            subscriber = self.sub.subscriber
            assert subscriber is not None
            subscriber.hand_back(item)  # a reset reads the store
            return True
        if not self.sub.is_next(item):
            return True
        # Written out here rather than shared with deliver_run: this is every delivery's path,
        # and a call more cost ~0.15 µs of its ~1.4 (bench.floor's Python path, alternating).
        progress = item.progress
        if progress is not None and self.sub.accept_progress(progress):
            if not self._write(item.sse_chunk_with_progress):
                return False
            self.metrics.frames_out += 1
        elif not self._write(item.sse_chunk):
            return False
        self.sub.sent(item)
        self.metrics.frames_out += 1
        self.metrics.deltas_out += 1
        return True

    def deliver_run(self, run: FeedRun) -> bool:
        if not self.sub.is_next(run.items[0]):
            return all(self.deliver(item) for item in run.items)
        n = len(run.items)
        last = run.items[-1]
        progress = last.progress
        if progress is not None and self.sub.accept_progress(progress):
            if not self._write(run.sse_chunk_with_progress, n):
                return False
            self.metrics.frames_out += 1
        elif not self._write(run.sse_chunk, n):
            return False
        self.sub.sent(last)
        self.metrics.frames_out += n
        self.metrics.deltas_out += n
        return True

    def deliver_progress(self, progress: Progress) -> None:
        if self.sub.accept_progress(progress):
            if self._write(progress.sse_chunk):
                self.metrics.frames_out += 1
            else:
                subscriber = self.sub.subscriber
                assert subscriber is not None
                subscriber.overflow()

    def write_frames(self, out: list[frames.Frame], last_event_id: str | None) -> bool:
        """Write ``out``; if the client cannot take them all, the subscription's last event id
        is that of the last frame written (``last_event_id`` if none was)."""
        for f in out:
            if not self._write(http_chunk(f.sse)):
                self.sub.last_event_id = last_event_id
                return False
            if f.id is not None:
                last_event_id = f.id
            self.metrics.frames_out += 1
            if f.event == frames.DELTA:
                self.metrics.deltas_out += 1
        return True

    def tick(self, now: float, wall: float, heartbeat: float) -> None:
        subscriber = self.sub.subscriber
        if subscriber is None:
            return
        cohort = subscriber.cohort
        last_write = self.last_write if cohort is None else max(self.last_write, cohort.last_write)
        if self.transport.is_closing() or wall >= self.expires_at:
            subscriber.wake()
        elif now - last_write >= heartbeat and self._write(HEARTBEAT_CHUNK):
            self.pending = 0
            if cohort is not None and self._buffered() and subscriber.hub is not None:
                # The rest of the heartbeat is queued: the cohort's next write must not pass it.
                subscriber.hub.unsettle(subscriber)
                subscriber.hub.settle(subscriber)

    # The connection's owner (``server.edge.Owner``).

    def lost(self) -> None:
        subscriber = self.sub.subscriber
        if subscriber is not None:
            subscriber.wake()

    def shutdown(self) -> None:
        self.ticker.shut_down()

    def exit(self) -> None:
        subscriber = self.sub.subscriber
        if subscriber is not None:
            subscriber.wake()

    def woken(self) -> None:
        """The subscriber was woken (``Subscriber.on_wake``): run the stream, unless it runs or
        is about to (a task made for an earlier wake that has not started yet)."""
        if (not self._running and self._end is not None
                and (self._task is None or self._task.done())):  # fmt: skip
            self._task = asyncio.get_running_loop().create_task(self.run())

    async def run(self) -> None:
        """Send what the subscriber holds, then leave the stream to the hub; or end it."""
        self._running = True
        sub = self.sub
        subscriber = sub.subscriber
        assert subscriber is not None
        up_to_date = False
        try:
            while True:
                subscriber.clear()
                body = _ending(sub, self, self.expires_at)
                if body is None:
                    body = await _take_over(sub, self)
                if body is not None:
                    self.finish(body)
                    return
                if not subscriber.woken:
                    up_to_date = True
                    return  # the hub writes to the stream; the next wake runs this again
        except Exception:
            # A reset could not read the store: the client resumes from its last event id.
            log.warning("SSE stream of %s/%s closed on an error", sub.view, sub.key, exc_info=True)
            self.finish(None)
        except BaseException:
            self.finish(None)
            raise
        finally:
            self._running = False
            self._task = None
            if up_to_date and subscriber.hub is not None:
                subscriber.hub.settle(subscriber)  # it may join its key's cohort

    def finish(self, body: bytes | None) -> None:
        """End the stream: ``body`` and the last chunk, unless None; then close the connection
        (given up after the linger of ``server.edge`` if the client does not take the rest)."""
        end, self._end = self._end, None
        if end is None:
            return
        self.ticker.remove(self)
        subscriber = self.sub.subscriber
        if subscriber is not None:
            if subscriber.hub is not None:
                subscriber.hub.unsettle(subscriber)
            subscriber.sink = None
            subscriber.on_wake = None
        transport = self.transport
        if body is not None and not transport.is_closing():
            self._write_raw(http_chunk(body) + LAST_CHUNK if body else LAST_CHUNK)
            if body:
                self.metrics.frames_out += 1
                self.metrics.bytes_out += len(body)
        transport.close()
        end()


async def begin(first: list[frames.Frame], metrics: Metrics, send: Send) -> None:
    """Send a started subscription's response head and first frames."""
    await send({"type": "http.response.start", "status": 200, "headers": HEADERS})
    await send({"type": "http.response.body", "body": _body(first, metrics), "more_body": True})
    first.clear()  # a snapshot can be large, and the stream lives on


async def serve(
    sub: Subscription, expires_at: float, ticker: Ticker, metrics: Metrics, scope: Scope,
    receive: Receive, send: Send, end: Callable[[], None],
) -> None:  # fmt: skip
    """Send the rest of a started subscription's stream (after ``begin``); ``end`` is called
    once it has ended.

    Under the gateway's HTTP protocol (``server.edge``) the stream takes its connection over
    and this returns as soon as the stream is up to date: the stream lives on without a task.
    """
    transport = transport_of(scope)
    release = getattr(transport, "release", None)
    if release is not None:
        stream = LiveStream(sub, transport, ticker, metrics, expires_at, end)
        if release(stream):
            subscriber = sub.subscriber
            assert subscriber is not None
            subscriber.on_wake = stream.woken
            ticker.add(stream)
            await stream.run()
            return
    try:
        await _serve_through_asgi(sub, expires_at, ticker, metrics, receive, send)
    finally:
        end()


async def _take_over(sub: Subscription, stream: LiveStream) -> bytes | None:
    """Send what the subscriber buffered, then let the hub write to the stream directly."""
    subscriber = sub.subscriber
    assert subscriber is not None
    while True:
        if (subscriber.state is not SubscriberState.ATTACHED or stream.transport.is_closing()
                or stream.ticker.exiting):  # fmt: skip
            return _ending(sub, stream, float("inf"))
        if subscriber.sink is stream:
            return None
        if not subscriber.buffer and subscriber.progress is None:
            subscriber.sink = stream  # nothing awaited since the check: no item slips past
            return None
        before = sub.last_event_id
        try:
            out = await sub.next_frames()
        except SlowConsumer:
            return _ending(sub, stream, float("inf"))
        if not stream.write_frames(out, before):
            subscriber.overflow()


def _ending(sub: Subscription, stream: LiveStream, expires_at: float) -> bytes | None:
    """The last bytes of the stream if it must end now (an ``end`` frame, or none on shutdown),
    or None to go on."""
    subscriber = sub.subscriber
    assert subscriber is not None
    if subscriber.state is SubscriberState.OVERFLOWED:
        sub.source.hub.drop(subscriber)
        return frames.end("slow_consumer",
                          "this subscriber fell too far behind; resume from last_event_id.",
                          sub.last_event_id).sse  # fmt: skip
    if time.time() >= expires_at:
        return frames.end("token_expired", "the token expired; resume with a new one.",
                          sub.last_event_id).sse  # fmt: skip
    if stream.transport.is_closing():
        return frames.end("closed", "", sub.last_event_id).sse
    if stream.ticker.exiting:
        return b""  # the client resumes with the id of the last frame it got
    return None


def _body(out: list[frames.Frame], metrics: Metrics) -> bytes:
    body = b"".join(f.sse for f in out)
    metrics.frames_out += len(out)
    metrics.deltas_out += sum(1 for f in out if f.event == frames.DELTA)
    metrics.bytes_out += len(body)
    return body


async def _serve_through_asgi(
    sub: Subscription, expires_at: float, ticker: Ticker, metrics: Metrics,
    receive: Receive, send: Send,
) -> None:  # fmt: skip
    """Any other server: wait for frames or the client's disconnect, send each batch."""
    gone = asyncio.ensure_future(_disconnected(receive))
    try:
        while True:
            remaining = expires_at - time.time()
            if remaining <= 0:
                end = frames.end("token_expired", "the token expired; resume with a new one.",
                                 sub.last_event_id)  # fmt: skip
                await send({"type": "http.response.body", "body": _body([end], metrics)})
                return
            waiting = asyncio.ensure_future(sub.wait())
            done, _ = await asyncio.wait(
                {gone, waiting}, timeout=min(ticker.heartbeat, remaining),
                return_when=asyncio.FIRST_COMPLETED,
            )  # fmt: skip
            waiting.cancel()
            if gone in done:
                return
            if not done:
                metrics.bytes_out += len(frames.SSE_HEARTBEAT)
                await send({"type": "http.response.body", "body": frames.SSE_HEARTBEAT,
                            "more_body": True})  # fmt: skip
                continue
            try:
                out = await sub.next_frames()
            except SlowConsumer as exc:
                end = frames.end(exc.code, exc.message, sub.last_event_id)
                await send({"type": "http.response.body", "body": _body([end], metrics)})
                return
            if out:
                await send({"type": "http.response.body", "body": _body(out, metrics),
                            "more_body": True})  # fmt: skip
    finally:
        gone.cancel()


async def _disconnected(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
