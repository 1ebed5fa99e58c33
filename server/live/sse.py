"""SSE: a stream's frames as HTTP/1.1 chunks, written straight to a connection it owns.

Every SSE stream is served here, by the one sender (``liveviews.gateway.live.sender``): a view's
subscription and the log feed alike (``liveviews.gateway.live.source``).

After the first frames, the stream takes its connection over from uvicorn's HTTP protocol
(``liveviews.gateway._uvicorn``): the sender is then the connection's owner, and the hub hands each
delta and progress to it (``liveviews.gateway.live.sender``), which writes the frame's shared,
pre-encoded chunk to the connection at once: to its socket while the transport holds nothing unsent,
else through the transport, which queues it in order. An idle stream holds no task and none of the
HTTP protocol's per-connection state. The process's ``Ticker`` writes its heartbeats and notices an
expired token, a lost connection and the server's shutdown.

Not sse-starlette's ``EventSourceResponse``, which the gateway used at first: it keeps four
tasks per connection and its own copy of each frame, 43 µs of CPU per delivery and 48 KB per
idle stream against 15 µs and 18 KB here (docs/performance/fanout.md); the benchmarks' naive
gateway (``bench/baselines/naive_gateway.py``) still serves with it.

A key's streams in step write through their cohort (``group_write``): one chunk, one loop of
system calls. Under any other server, or on a connection that cannot be taken over (a request
pipelined behind the stream), the stream sends each batch of frames through ASGI instead
(``_serve_through_asgi``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable
from typing import Any

from starlette.types import Receive, Scope, Send

from liveviews.gateway._uvicorn import response_transport
from liveviews.gateway.errors import SlowConsumer
from liveviews.gateway.fanout.cohort import Cohort
from liveviews.gateway.fanout.items import FeedDelta, FeedRun, Progress
from liveviews.gateway.fanout.subscriber import Subscriber
from liveviews.gateway.live.sender import TOKEN_EXPIRED, Sender
from liveviews.gateway.live.source import FrameSource
from liveviews.gateway.live.ticker import Ticker
from liveviews.gateway.live.writes import socket_fd, write_now
from liveviews.gateway.metrics import Metrics
from liveviews.gateway.wire import frames

log = logging.getLogger("liveviews.gateway.sse")

HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-store"),
    (b"x-accel-buffering", b"no"),
]
LAST_CHUNK = b"0\r\n\r\n"
_ALONE, _WITH_PROGRESS = "sse", "sse+progress"
_os_write = os.write


def http_chunk(body: bytes) -> bytes:
    return b"%x\r\n%b\r\n" % (len(body), body)


HEARTBEAT_CHUNK = http_chunk(frames.SSE_HEARTBEAT)


def deltas_chunk(source: FeedDelta | FeedRun, with_progress: bool) -> bytes:
    """``source``'s frames (and the frontier riding on its last delta) as one chunk, encoded
    once and shared by every stream that writes it: one write, one system call."""
    key = _WITH_PROGRESS if with_progress else _ALONE
    chunk = source.encoded.get(key)
    if chunk is None:
        items = source.items if isinstance(source, FeedRun) else [source]
        body = b"".join(item.frame.sse for item in items)
        if with_progress:
            progress = items[-1].progress
            assert progress is not None
            body += progress.frame.sse
        chunk = source.encoded[key] = http_chunk(body)
    return chunk


def progress_chunk(progress: Progress) -> bytes:
    chunk = progress.encoded.get(_ALONE)
    if chunk is None:
        chunk = progress.encoded[_ALONE] = http_chunk(progress.frame.sse)
    return chunk


class SseSender(Sender):
    """One SSE stream that owns its connection: a subscription's sink once it is up to date, and
    the owner (``liveviews.gateway._uvicorn.Owner``) of its connection once the HTTP protocol has
    released it."""

    __slots__ = ("transport", "fd", "expires_at", "last_write", "_write_raw", "is_closing",
                 "_buffered", "_end")  # fmt: skip

    joins_cohorts = True
    exit_frame = b""  # the last chunk alone: the response ends cleanly between frames

    def __init__(
        self, sub: FrameSource, transport: Any, ticker: Ticker, metrics: Metrics,
        expires_at: float, end: Callable[[], None], send_timeout: float = 10.0,
    ) -> None:  # fmt: skip
        super().__init__(sub, ticker, metrics, send_timeout)
        self.expires_at = expires_at
        self.last_write = ticker.now
        """When the stream last wrote (the ticker's clock): a heartbeat follows a quiet one."""
        self.transport = transport
        self._end = end
        """Called once, when the stream has ended."""
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
        unsent = bool(self._buffered())
        if not self._keeps_up(count, unsent):
            return False  # the client does not read: the slow-consumer policy applies
        if unsent:
            self._write_raw(chunk)
        else:
            write_now(self.fd, chunk, self._write_raw)
        self.last_write = self.ticker.now
        self.metrics.bytes_out += len(chunk)
        return True

    # The transport's part of a sender.

    def _closing(self) -> bool:
        return bool(self.is_closing())

    def _send_deltas(self, source: FeedDelta | FeedRun, with_progress: bool, count: int) -> bool:
        chunk = source.encoded.get(_WITH_PROGRESS if with_progress else _ALONE)
        if chunk is None:
            chunk = deltas_chunk(source, with_progress)
        return self._write(chunk, count)

    def _send_progress(self, progress: Progress) -> bool:
        return self._write(progress_chunk(progress))

    def _send_frames(self, out: list[frames.Frame], first: bool) -> bool:
        # Never a subscription's first: those went out with the response's head (``begin``).
        return self._write(b"".join(http_chunk(f.sse) for f in out), len(out))

    def _unsent(self) -> bool:
        return bool(self._buffered())

    def _end_frame(self, code: str, message: str, **fields: Any) -> bytes:
        return frames.end(code, message, fields.get("last_event_id")).sse

    def _close(self, last: bytes | None) -> None:
        """``last`` and the last chunk, unless None; then close the connection (given up after
        the linger of ``liveviews.gateway._uvicorn.http`` if the client does not take the rest)."""
        self.ticker.remove(self)
        transport = self.transport
        if last is not None and not transport.is_closing():
            self._write_raw(http_chunk(last) + LAST_CHUNK if last else LAST_CHUNK)
            if last:
                self.metrics.frames_out += 1
                self.metrics.bytes_out += len(last)
        transport.close()
        self._end()

    def _up_to_date(self) -> None:
        subscriber = self.sub.subscriber
        if subscriber is not None and subscriber.hub is not None:
            subscriber.hub.settle(subscriber)  # it may join its key's cohort

    def _failed(self, exc: Exception) -> None:
        # A reset could not read the store: the client resumes from its last event id.
        log.warning("SSE stream of %s closed on an error", self.sub, exc_info=exc)
        self.finish()

    # A cohort's member (``liveviews.gateway.fanout.cohort.Member``).

    def writes_at_once(self) -> bool:
        """Does the stream write straight to its socket, with nothing queued on its transport,
        and the hub hands it its items?"""
        subscriber = self.sub.subscriber
        return (
            self.fd >= 0
            and not self.ended
            and not self._running
            and subscriber is not None
            and subscriber.sink is self
            and not self.is_closing()
            and not self._buffered()
        )

    # The ticker's stream.

    def tick(self, now: float, wall: float, heartbeat: float) -> None:
        subscriber = self.sub.subscriber
        if subscriber is None:
            return
        # Once a second for every stream: the bound ``is_closing``, not the wrapped transport's
        # attribute lookup, and no ``max`` call (a slice of 500 streams took 1.06 ms, now 0.51).
        cohort = subscriber.cohort
        last_write = self.last_write
        if cohort is not None and cohort.last_write > last_write:
            last_write = cohort.last_write
        if self.is_closing() or wall >= self.expires_at:
            subscriber.wake()
        elif now - last_write >= heartbeat and self._write(HEARTBEAT_CHUNK):
            self.pending = 0
            if cohort is not None and self._buffered() and subscriber.hub is not None:
                # The rest of the heartbeat is queued: the cohort's next write must not pass it.
                subscriber.hub.unsettle(subscriber)
                subscriber.hub.settle(subscriber)

    def exit(self) -> None:
        subscriber = self.sub.subscriber
        if subscriber is not None:
            subscriber.wake()

    # The connection's owner (``liveviews.gateway._uvicorn.Owner``).

    def lost(self) -> None:
        self.exit()

    def shutdown(self) -> None:
        self.ticker.shut_down()


def group_write(
    members: dict[Subscriber, Any], source: FeedDelta | FeedRun | Progress, with_progress: bool,
    metrics: Metrics,
) -> list[tuple[Subscriber, bool]]:  # fmt: skip
    """A cohort's write (``liveviews.gateway.fanout.cohort.GroupWrite``): the one chunk to every
    member's socket. Those whose connection is closing, or whose socket takes none of it, took
    nothing; one that took part of it has the rest queued on its transport."""
    if isinstance(source, Progress):
        chunk = progress_chunk(source)
    else:
        chunk = deltas_chunk(source, with_progress)
    size = len(chunk)
    troubled: list[tuple[Subscriber, bool]] = []
    for sub, stream in members.items():
        if stream.is_closing():
            troubled.append((sub, False))
            continue
        try:
            sent = _os_write(stream.fd, chunk)
        except OSError:
            sent = 0  # the stream's own path meets the error again and closes the transport
        if sent != size:
            if sent:
                stream._write_raw(chunk[sent:])
            troubled.append((sub, sent > 0))
    metrics.bytes_out += size * (len(members) - sum(1 for _, took in troubled if not took))
    return troubled


async def begin(first: list[frames.Frame], metrics: Metrics, send: Send) -> None:
    """Send a started stream's response head and first frames."""
    await send({"type": "http.response.start", "status": 200, "headers": HEADERS})
    await send({"type": "http.response.body", "body": body_of(first, metrics), "more_body": True})
    first.clear()  # a snapshot can be large, and the stream lives on


async def serve(
    sub: FrameSource, expires_at: float, ticker: Ticker, metrics: Metrics, scope: Scope,
    receive: Receive, send: Send, end: Callable[[], None], send_timeout: float = 10.0,
) -> None:  # fmt: skip
    """Send the rest of a started stream (after ``begin``): the rest of what a resume missed,
    then its live frames; ``end`` is called once it has ended.

    Under the gateway's HTTP protocol the stream takes its connection over and this returns as
    soon as the stream is up to date: the stream lives on without a task.
    """
    transport = response_transport(scope)
    release = getattr(transport, "release", None)
    if release is not None:
        stream = SseSender(sub, transport, ticker, metrics, expires_at, end, send_timeout)
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


def body_of(out: list[frames.Frame], metrics: Metrics) -> bytes:
    """``out`` as one body, counted."""
    body = b"".join(f.sse for f in out)
    metrics.frames_out += len(out)
    metrics.deltas_out += sum(1 for f in out if f.event == frames.DELTA)
    metrics.bytes_out += len(body)
    return body


async def _serve_through_asgi(
    sub: FrameSource, expires_at: float, ticker: Ticker, metrics: Metrics,
    receive: Receive, send: Send,
) -> None:  # fmt: skip
    """Any other server: wait for frames or the client's disconnect, send each batch. A resume's
    pages of history go first, one per ``send``, which waits while the client has not taken
    what was written before."""
    subscriber = sub.subscriber
    assert subscriber is not None
    gone = asyncio.ensure_future(_disconnected(receive))
    try:
        while True:
            remaining = expires_at - time.time()
            if remaining <= 0:
                end = frames.end("token_expired", TOKEN_EXPIRED, sub.last_event_id)
                await send({"type": "http.response.body", "body": body_of([end], metrics)})
                return
            if gone.done():
                return
            if sub.history is None:
                waiting = asyncio.ensure_future(subscriber.wait())
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
                await send({"type": "http.response.body", "body": body_of([end], metrics)})
                return
            if out:
                await send({"type": "http.response.body", "body": body_of(out, metrics),
                            "more_body": True})  # fmt: skip
    finally:
        gone.cancel()


async def _disconnected(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


def sse_cohort(ticker: Ticker, metrics: Metrics) -> Cohort:
    """A cohort of SSE senders: the hub's ``new_cohort`` (``liveviews.gateway.gateway``)."""

    def write(
        members: dict[Subscriber, Any], source: FeedDelta | FeedRun | Progress, with_progress: bool
    ) -> list[tuple[Subscriber, bool]]:
        return group_write(members, source, with_progress, metrics)

    return Cohort(write, lambda: ticker.now, metrics)
