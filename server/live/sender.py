"""One stream's sender: the delivery rules every stream and both transports share.

A sender delivers a ``FrameSource`` (``liveviews.gateway.live.source``): a view's subscription,
or a reader of the log feed, which keep the same rules by going through this one loop. Once a
subscription is up to date the hub hands its items straight to its sender
(``Subscriber.sink``), which writes them to the client at once; there is no task per
subscription while it waits. A sender keeps the protocol's rules here, once:

- ordering: a delta is written only if it is next (``Cursor.is_next``); a frontier only if it
  moves the subscription's, and riding in the same write as the last delta it covers;
- slow consumers: frames written while the client has not taken earlier ones count against the
  subscriber buffer (``LV_SUBSCRIBER_BUFFER``); past it the stream ends with
  ``slow_consumer`` and the last event id it was sent;
- wake-ups: what needs the store (the first frames of a WebSocket subscription, a reset after
  the store was replaced, the deltas buffered while it read), what a source without a cursor
  buffered (a query's items, the log feed's frames), or what ends the stream wakes it, and one
  task runs until it is up to date again (``run``) or has ended;
- history: a resume's missed deltas are read a page at a time, each page only once the client
  has taken everything written before it; a client that has not within the send timeout is a
  slow consumer. The store reads of one connection's subscriptions take turns (``reads``), and
  one that has begun is let finish rather than cancelled, so a client subscribing and
  unsubscribing in a loop costs at most one read at a time;
- ending: overflow, an expired token, a closed connection or the server's shutdown end it, each
  the same way on every transport and for every source.

A transport (``liveviews.gateway.live.sse``, ``liveviews.gateway.live.ws``) supplies only how frames
are framed and written (the ``_send_*`` methods), how it ends (``_close``), and what its
connection's state is.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from redis.exceptions import RedisError

from liveviews.gateway.errors import SLOW_CONSUMER, GatewayError, SlowConsumer
from liveviews.gateway.fanout.items import EpochChanged, FeedDelta, FeedRun, Item, Progress
from liveviews.gateway.fanout.subscriber import SubscriberState
from liveviews.gateway.live.source import FrameSource
from liveviews.gateway.live.ticker import Ticker
from liveviews.gateway.metrics import Metrics
from liveviews.gateway.wire import frames

log = logging.getLogger("liveviews.gateway.live")

TOKEN_EXPIRED = "the token expired; resume with a new one."
STORE_UNREADABLE = "the store could not be read; resume shortly."
DRAIN_POLL_SECONDS = 0.005


class Sender:
    """One stream's task, and the hub's sink for a subscription
    (``liveviews.gateway.fanout.subscriber.Sink``) once it is up to date."""

    __slots__ = ("sub", "cursor", "ticker", "metrics", "pending", "ended", "drain_timeout",
                 "_running", "_reading", "_task")  # fmt: skip

    expires_at = float("inf")
    """When the stream's token expires (an SSE stream's own; a WebSocket session watches its
    token for all its subscriptions)."""

    joins_cohorts = False
    """May it join its key's cohort once up to date (``liveviews.gateway.fanout.cohort``)?"""
    exit_frame: bytes | None = None
    """What ``_close`` writes when the server shuts down (None: nothing)."""
    reads: asyncio.Lock | None = None
    """Taken around each store read, if the connection carries other subscriptions."""

    def __init__(self, sub: FrameSource, ticker: Ticker, metrics: Metrics,
                 drain_timeout: float = 10.0) -> None:  # fmt: skip
        self.sub = sub
        """What it delivers: a subscription, or a reader of the log feed."""
        self.cursor = sub.cursor
        """What orders the hub's items once it is the sink; None if it never is."""
        self.ticker = ticker
        self.metrics = metrics
        self.pending = 0  # frames written since the client was last seen to have taken all
        self.ended = False
        self.drain_timeout = drain_timeout
        """How long a page of history waits for the client to take what was written before
        it (the send timeout)."""
        self._running = False
        self._reading = False
        self._task: asyncio.Task[None] | None = None

    # What a transport supplies.

    def _closing(self) -> bool:
        """Is the connection closed or closing: nothing more can be written?"""
        raise NotImplementedError

    def _send_deltas(self, source: FeedDelta | FeedRun, with_progress: bool, count: int) -> bool:
        """Write ``source``'s ``count`` deltas (and the frontier riding on the last, if
        ``with_progress``) in one write; False if the client does not keep up."""
        raise NotImplementedError

    def _send_progress(self, progress: Progress) -> bool:
        raise NotImplementedError

    def _send_frames(self, out: list[frames.Frame], first: bool) -> bool:
        """Write frames read from the store in one write, counted against the buffer unless
        they are a subscription's ``first`` (its snapshot, or the first page of what it
        missed); False, and nothing written, if the client does not keep up."""
        raise NotImplementedError

    def _unsent(self) -> bool:
        """Does the connection hold written bytes the client has not taken yet?"""
        raise NotImplementedError

    def _end_frame(self, code: str, message: str, **fields: Any) -> bytes:
        """The transport's last message of a stream that ends with ``code``; ``fields`` such
        as ``last_event_id`` go with it."""
        raise NotImplementedError

    def _close(self, last: bytes | None) -> None:
        """The stream has ended: write ``last`` unless None, then let go of it."""
        raise NotImplementedError

    def _up_to_date(self) -> None:
        """The task has sent everything and left the stream to its publisher."""

    def _failed(self, exc: Exception) -> None:
        """The task failed: a protocol error ends the stream with its code, the store's failure
        with ``store_unavailable``; anything else closes it, logged."""
        sub = self.sub
        if isinstance(exc, GatewayError):
            self.finish(self._end_frame(exc.code, exc.message, **exc.extra))
        elif isinstance(exc, RedisError):
            log.warning("subscription to %s failed to read the store", sub, exc_info=exc)
            self.finish(self._end_frame(
                "store_unavailable", STORE_UNREADABLE, last_event_id=sub.last_event_id
            ))  # fmt: skip
        else:
            log.error("subscription to %s failed", sub, exc_info=exc)
            self.finish()

    # The slow-consumer rule.

    def _keeps_up(self, count: int, unsent: bool) -> bool:
        """Count ``count`` frames about to be written to a connection that holds ``unsent``
        bytes the client has not taken yet; False if the stream would then be too far behind
        the client: more unsent than its subscriber buffer holds."""
        if unsent:
            self.pending += count
            subscriber = self.sub.subscriber
            if subscriber is not None and self.pending > subscriber.capacity:
                return False
        else:
            self.pending = count
        return True

    # The hub's sink: only a sender with a cursor is made one (``_catch_up``).

    def deliver(self, item: Item) -> bool:
        if isinstance(item, EpochChanged):
            subscriber = self.sub.subscriber
            assert subscriber is not None
            subscriber.hand_back(item)  # a reset reads the store
            return True
        cursor = self.cursor
        assert cursor is not None
        if not cursor.is_next(item):
            return True
        progress = item.progress
        with_progress = progress is not None and cursor.accept_progress(progress)
        if not self._send_deltas(item, with_progress, 1):
            return False
        cursor.sent(item)
        metrics = self.metrics
        metrics.frames_out += 2 if with_progress else 1
        metrics.deltas_out += 1
        return True

    def deliver_run(self, run: FeedRun) -> bool:
        cursor = self.cursor
        assert cursor is not None
        if not cursor.is_next(run.items[0]):
            return all(self.deliver(item) for item in run.items)
        last = run.items[-1]
        progress = last.progress
        with_progress = progress is not None and cursor.accept_progress(progress)
        n = len(run.items)
        if not self._send_deltas(run, with_progress, n):
            return False
        cursor.sent(last)
        metrics = self.metrics
        metrics.frames_out += n + 1 if with_progress else n
        metrics.deltas_out += n
        return True

    def deliver_progress(self, progress: Progress) -> None:
        cursor = self.cursor
        assert cursor is not None
        if cursor.accept_progress(progress):
            if self._send_progress(progress):
                self.metrics.frames_out += 1
            else:
                subscriber = self.sub.subscriber
                assert subscriber is not None
                subscriber.overflow()

    def write_frames(
        self, out: list[frames.Frame], last_event_id: str | None, first: bool = False
    ) -> bool:
        """Write ``out``; if the client does not keep up, none of it, and the stream's last
        event id is ``last_event_id`` again (that of the last frame written before)."""
        if not out:
            return True
        if not self._send_frames(out, first):
            self.sub.last_event_id = last_event_id
            return False
        metrics = self.metrics
        metrics.frames_out += len(out)
        metrics.deltas_out += sum(1 for f in out if f.event == frames.DELTA)
        return True

    # Its task.

    def woken(self) -> None:
        """The subscriber was woken (``Subscriber.on_wake``): run the sender, unless it runs or
        is about to (a task made for an earlier wake that has not started yet)."""
        if (not self._running and not self.ended
                and (self._task is None or self._task.done())):  # fmt: skip
            self._task = asyncio.get_running_loop().create_task(self.run())
            self._task.add_done_callback(log_failure)

    async def run(self) -> None:
        """Send what the stream has to send, then leave it to its publisher; or end it."""
        self._running = True
        sub = self.sub
        up_to_date = False
        try:
            if sub.subscriber is None:  # started here: its first frames are read now
                first = await self._read(sub.start)
                if first is None:
                    self.metrics.slow_consumers += 1
                    self.finish(self._end_frame(
                        "slow_consumer", SLOW_CONSUMER, last_event_id=sub.last_event_id
                    ))  # fmt: skip
                    return
                if self.ended:  # unsubscribed while it read: let go of what it attached
                    sub.close()
                    return
                out = first
                assert sub.subscriber is not None
                sub.subscriber.on_wake = self.woken
                self.write_frames(out, sub.last_event_id, first=True)
                out.clear()  # a snapshot can be large, and the subscription lives on
            subscriber = sub.subscriber
            assert subscriber is not None
            while not self.ended:
                subscriber.clear()
                if self._must_end():
                    return
                await self._catch_up()
                if self._must_end():
                    return
                if not subscriber.woken:
                    up_to_date = True
                    return  # the next wake runs this again (or the hub writes to the sender)
        except Exception as exc:
            self._failed(exc)
        except BaseException:
            self.finish()
            raise
        finally:
            self._running = False
            if self._task is asyncio.current_task():
                self._task = None
            if up_to_date and not self.ended:
                self._up_to_date()

    async def _catch_up(self) -> None:
        """Send what the subscriber buffered, then let the hub write to the sender directly if
        it has a cursor."""
        sub = self.sub
        subscriber = sub.subscriber
        assert subscriber is not None
        while not self.ended:
            if (subscriber.state is not SubscriberState.ATTACHED or self._closing()
                    or self.ticker.exiting):  # fmt: skip
                return
            if subscriber.sink is self:
                return
            if not sub.has_frames():
                # Nothing awaited since the check: no item slips past. A source without a cursor
                # (a query, the log feed) makes its frames itself: it keeps taking them from its
                # buffer.
                if self.cursor is not None:
                    subscriber.sink = self
                return
            before = sub.last_event_id
            try:
                # A page of history waits for the client to take what it was sent before.
                out = await self._read(sub.next_frames, drain=sub.history is not None)
            except SlowConsumer:
                return
            if out is None:
                subscriber.overflow()  # it has not taken the last page: a slow consumer
                return
            if self.ended:
                return
            if not self.write_frames(out, before):
                subscriber.overflow()

    async def _drained(self) -> bool:
        """Wait until the connection holds nothing unsent, or is closing; False if it still
        holds some after ``drain_timeout``: the client is not taking what it was sent."""
        if not self._unsent():
            return True
        deadline = time.monotonic() + self.drain_timeout
        delay = DRAIN_POLL_SECONDS
        while self._unsent() and not self._closing() and not self.ended:
            if time.monotonic() >= deadline:
                return False
            # Polled, and more slowly the longer it takes: only a resume that has written a
            # page to a client that is not reading waits here.
            await asyncio.sleep(delay)
            delay = min(2 * delay, 0.25)
        return True

    async def _read(
        self, read: Callable[[], Awaitable[list[frames.Frame]]], drain: bool = True
    ) -> list[frames.Frame] | None:
        """``read()`` from the store, in turn with the connection's other subscriptions and,
        if ``drain``, once the client has taken what was written before: None, unread, if it
        has not within ``drain_timeout``. A read that has begun is not cancelled by ``finish``
        (cancelled halfway, it would cost the store connection it runs on)."""
        lock = self.reads
        if lock is not None:
            await lock.acquire()
        try:
            if drain and not await self._drained():
                return None
            subscriber = self.sub.subscriber
            if self.ended or (subscriber is not None
                              and subscriber.state is SubscriberState.CLOSED):  # fmt: skip
                return []
            self._reading = True
            try:
                return await read()
            finally:
                self._reading = False
        finally:
            if lock is not None:
                lock.release()

    def _must_end(self) -> bool:
        """End the stream if it must end now; True if it has."""
        sub = self.sub
        subscriber = sub.subscriber
        assert subscriber is not None
        if subscriber.state is SubscriberState.OVERFLOWED:
            if subscriber.hub is not None:  # counted as it is dropped
                subscriber.hub.drop(subscriber)
            else:  # a group's or a log reader's, which no hub holds: its end detaches it
                self.metrics.slow_consumers += 1
            self.finish(
                self._end_frame("slow_consumer", SLOW_CONSUMER, last_event_id=sub.last_event_id)
            )
        elif time.time() >= self.expires_at:
            self.finish(
                self._end_frame("token_expired", TOKEN_EXPIRED, last_event_id=sub.last_event_id)
            )
        elif subscriber.state is SubscriberState.CLOSED or self._closing():
            self.finish()
        elif self.ticker.exiting:
            self.finish(self.exit_frame)  # the client resumes with its last event id
        else:
            return False
        return True

    def finish(self, last: bytes | None = None) -> None:
        """End the stream: ``last`` is its last message, unless None."""
        if self.ended:
            return
        self.ended = True
        subscriber = self.sub.subscriber
        if subscriber is not None:
            if subscriber.hub is not None:
                subscriber.hub.unsettle(subscriber)
            subscriber.sink = None
            subscriber.on_wake = None
        task, self._task = self._task, None
        if task is not None and task is not asyncio.current_task() and not self._reading:
            task.cancel()  # a task that is reading sees ``ended`` when the read returns
        self._close(last)


def log_failure(task: asyncio.Task[Any]) -> None:
    """A done callback that logs what a task that nobody awaits failed on."""
    if task.cancelled():
        return
    exc = task.exception()
    if exc is not None:
        log.error("task %s failed", task.get_name(), exc_info=exc)
