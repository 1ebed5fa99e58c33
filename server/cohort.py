"""SSE streams of one (view, key) in step: one cursor, one loop of socket writes per item.

At 10k subscribers of one key, a delta is 10k deliveries of the same pre-encoded chunk. Each
stream taking it through its own path (``LiveStream.deliver``: its cursor's checks, the
transport's state, the write, the bookkeeping) spent ~3 µs of Python per delivery beside the
system call, more than nginx+nchan spends in C. The streams of a key that were sent the same
frames, and whose sockets take everything written to them at once, need none of that apiece:
the cohort decides once whether an item is next and whether its frontier rides along, writes
the chunk to each member's socket, and moves its one cursor. A member whose connection is
closing, or whose socket does not take the whole chunk, leaves with the cursor it had, so it
takes the item through its own path, exactly as it would have without the cohort.

The hub owns cohorts (``server.hub.Cohort``); this is the one kind it makes.
"""

from __future__ import annotations

import os

from server.hub import FeedDelta, FeedRun, Progress, Subscriber, SubscriberState
from server.livestream import LiveStream, Ticker
from server.metrics import Metrics
from server.subscription import Cursor

_os_write = os.write


class StreamCohort:
    """Streams (``LiveStream``) of one key with one cursor: the hub's ``Cohort``."""

    __slots__ = ("members", "cursor", "last_write", "ticker", "metrics")

    def __init__(self, ticker: Ticker, metrics: Metrics) -> None:
        self.members: dict[Subscriber, LiveStream] = {}
        self.cursor = Cursor()
        self.last_write = ticker.now
        self.ticker = ticker
        self.metrics = metrics

    def __len__(self) -> int:
        return len(self.members)

    def admit(self, sub: Subscriber) -> bool:
        stream = sub.sink
        if (
            not isinstance(stream, LiveStream)
            or not stream.writes_at_once()
            or sub.state is not SubscriberState.ATTACHED
            or sub.woken
        ):
            return False
        if not self.members:
            stream.sub.copy_to(self.cursor)
            self.last_write = stream.last_write
        elif not stream.sub.same_as(self.cursor):
            return False
        self.members[sub] = stream
        return True

    def remove(self, sub: Subscriber) -> None:
        stream = self.members.pop(sub, None)
        if stream is not None:
            self._leave(stream, self.cursor)

    def _leave(self, stream: LiveStream, cursor: Cursor) -> None:
        cursor.copy_to(stream.sub)
        stream.last_write = max(stream.last_write, self.last_write)
        stream.pending = 0

    def deliver(self, items: list[FeedDelta], run: FeedRun | None) -> list[Subscriber]:
        cursor = self.cursor
        first, last = items[0], items[-1]
        if not cursor.is_next(first) or (run is None and len(items) > 1):
            # Not one write for all: each member takes the items through its own path.
            return self._disband()
        before = Cursor()
        cursor.copy_to(before)
        progress = last.progress
        with_progress = progress is not None and cursor.accept_progress(progress)
        cursor.sent(last)
        source = last if run is None else run
        chunk = source.sse_chunk_with_progress if with_progress else source.sse_chunk
        n = len(items)
        given_back, written = self._write(chunk, n, before)
        metrics = self.metrics
        metrics.frames_out += (n + 1 if with_progress else n) * written
        metrics.deltas_out += n * written
        return given_back

    def deliver_progress(self, progress: Progress) -> list[Subscriber]:
        before = Cursor()
        self.cursor.copy_to(before)
        if not self.cursor.accept_progress(progress):
            return []
        given_back, written = self._write(progress.sse_chunk, 1, before)
        self.metrics.frames_out += written
        return given_back

    def _write(self, chunk: bytes, count: int, before: Cursor) -> tuple[list[Subscriber], int]:
        """``chunk`` to every member's socket, the cursor already moved past it; the members
        given back, and how many took the chunk. Those whose connection is closing, or whose
        socket takes none of it, leave with ``before``; one that took part of it leaves with
        the cursor after it, the rest of the chunk queued on its transport."""
        size = len(chunk)
        troubled: list[tuple[Subscriber, LiveStream, int]] = []
        for sub, stream in self.members.items():
            if stream.is_closing():
                troubled.append((sub, stream, 0))
                continue
            try:
                sent = _os_write(stream.fd, chunk)
            except OSError:
                sent = 0  # the stream's own path meets the error again and closes the transport
            if sent != size:
                troubled.append((sub, stream, sent))
        now = self.last_write = self.ticker.now
        written = len(self.members) - len(troubled)
        given_back = []
        for sub, stream, sent in troubled:
            del self.members[sub]
            if sent:
                written += 1
                stream.queue(chunk[sent:])
                self._leave(stream, self.cursor)
                stream.pending = count
                stream.last_write = now
            else:
                self._leave(stream, before)
            given_back.append(sub)
        self.metrics.bytes_out += size * written
        return given_back, written

    def _disband(self) -> list[Subscriber]:
        members = list(self.members)
        for sub in members:
            self.remove(sub)
        return members
