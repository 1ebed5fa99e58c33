"""One subscription to one (view, key): the protocol's ordering rules, for both transports.

The subscriber is attached to the hub *before* the snapshot or the history is read, and the
hub buffers the deltas it reads meanwhile; afterwards only deltas after the last delivered
position are passed on. Every delta after that position is either in what was read or read by
the feed after the attachment, so nothing is missed, and nothing is sent twice.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from liveviews.changes.topic import split_physical
from liveviews.gateway.errors import SLOW_CONSUMER, SlowConsumer, Unavailable
from liveviews.gateway.fanout.cursor import Cursor
from liveviews.gateway.fanout.hub import Hub
from liveviews.gateway.fanout.items import EpochChanged, FeedDelta, Item
from liveviews.gateway.fanout.lane import Wanted, add_wait
from liveviews.gateway.fanout.subscriber import Subscriber, SubscriberState
from liveviews.gateway.feed.changes import ChangeFeed
from liveviews.gateway.feed.store import Client, HistoryGone, Layout, read_history, read_snapshot
from liveviews.gateway.metrics import Metrics
from liveviews.gateway.wire import frames
from liveviews.gateway.wire.eventid import EventId, position_tuple
from liveviews.pipeline.versions import split_epoch

FEED_START_TIMEOUT = 5.0
MAX_HISTORY_PAGE = 1000
"""Change-topic entries one page of a resume reads at most; a page is also never more than the
subscriber buffer, so that it can be written under the same rule as live deltas."""


@dataclass(frozen=True)
class Source:
    """What every subscription of a process reads from."""

    client: Client
    layout: Layout
    hub: Hub
    feed: ChangeFeed
    frontier_of: Callable[[str], str]
    """The frontier a view's subscribers follow: that of the pipeline writing the view."""
    buffer: int
    metrics: Metrics


class Subscription(Cursor):
    """Turns the hub's items for one (view, key) into the frames its client must receive.

    A resume reads the deltas it missed a page at a time (``start`` gives the first page, each
    ``next_frames`` the next one, until ``history`` is None), so that its sender writes each page
    only once the client has taken the one before: a resume from an old id costs a page of
    memory, not the retained shard.
    """

    __slots__ = ("source", "view", "key", "resume", "subscriber", "history", "early_waits")

    direct = True
    """Once up to date, may the hub write the key's shared frames straight to its sender? A
    query-shaped subscription (``liveviews.gateway.fanout.query``) makes frames of its own
    instead."""

    def __init__(self, source: Source, view: str, key: str, resume: EventId | None) -> None:
        super().__init__()
        self.source = source
        self.view = view
        self.key = key
        self.resume = resume
        self.subscriber: Subscriber | None = None
        self.last_event_id = str(resume) if resume else None
        self.history: str | None = None
        """While a resume has history left to read: the shard position it has read up to.
        Live deltas wait in the subscriber's buffer until it has read the rest."""
        self.early_waits: list[Wanted] = []
        """Offsets its client waits for before it was attached (``wait_for``)."""

    # What makes it a ``liveviews.gateway.live.source.FrameSource``, beside ``start``,
    # ``next_frames`` and ``close``.

    @property
    def cursor(self) -> Cursor | None:
        """Itself, by which its sender orders the hub's items, if ``direct``."""
        return self if self.direct else None

    def has_frames(self) -> bool:
        """A page of history to read, or what the hub buffered."""
        sub = self.subscriber
        assert sub is not None
        return self.history is not None or bool(sub.buffer) or sub.progress is not None

    def __str__(self) -> str:
        return f"{self.view}/{self.key}"

    def wait_for(self, wanted: Wanted) -> None:
        """The client waits for the view to reflect ``wanted``: the hub sends the covering
        frontier as soon as it reads one (``Hub.wait``)."""
        if self.subscriber is None:
            add_wait(self.early_waits, wanted)
            return
        self.source.hub.wait(self.subscriber, wanted)

    async def start(self) -> list[frames.Frame]:
        """Attach, then the first frames: a snapshot, the missed deltas, or a reset + snapshot."""
        if self.subscriber is not None:
            raise RuntimeError("Cannot start a subscription twice.")
        feed = self.source.feed
        if not feed.started.is_set():
            try:
                await asyncio.wait_for(feed.started.wait(), FEED_START_TIMEOUT)
            except TimeoutError:
                raise Unavailable(
                    "the gateway cannot read the change topic yet; is the store reachable? "
                    "Try again shortly.",
                    code="store_unavailable",
                ) from None
        self._attach()
        assert self.subscriber is not None
        for wanted in self.early_waits:
            self.source.hub.wait(self.subscriber, wanted)
        self.early_waits = []
        try:
            return await self._first()
        except BaseException:
            self.close()
            raise

    def _attach(self) -> None:
        self.subscriber = self.source.hub.attach(self.view, self.key, self.source.buffer)

    async def _first(self) -> list[frames.Frame]:
        """A snapshot, or the first page of the missed deltas, or a reset and a snapshot."""
        if self.resume is None:
            return [await self._snapshot()]
        return await self._catch_up(self.resume)

    def _taking(self) -> Subscriber:
        """The subscriber, to take its items; ``SlowConsumer`` if its buffer overflowed."""
        sub = self.subscriber
        if sub is None or sub.state is SubscriberState.CLOSED:
            raise RuntimeError("Cannot read a subscription that is not started or is closed.")
        if sub.state is SubscriberState.OVERFLOWED:
            raise SlowConsumer(SLOW_CONSUMER, last_event_id=self.last_event_id)
        return sub

    async def _snapshot(self) -> frames.Frame:
        s = self.source
        frontier_name = s.frontier_of(self.view)
        snap = await read_snapshot(s.client, s.layout, self.view, self.key, frontier_name)
        self.epoch = snap.epoch  # the store's and the view version's
        self.position = position_tuple(snap.position)
        self.progress_position = position_tuple(snap.progress)
        self.frontier = frames.progress(snap.frontier).data.decode()
        event_id = str(EventId(snap.epoch, snap.position))
        self.last_event_id = event_id
        return frames.snapshot(
            self.view, self.key, snap.rows, snap.frontier, event_id, lag_ms=snap.lag_ms
        )

    async def _reset(self, code: str, message: str) -> list[frames.Frame]:
        self.source.metrics.resets += 1
        return [frames.reset(code, message), await self._snapshot()]

    async def _catch_up(self, resume: EventId) -> list[frames.Frame]:
        self.epoch, self.history = resume.epoch, resume.position
        return await self._history_page()

    async def _history_page(self) -> list[frames.Frame]:
        """The next page of the missed deltas; or a reset and a snapshot if they are gone."""
        s, after = self.source, self.history
        assert after is not None
        try:
            page = await read_history(
                s.client, s.layout, self.view, self.key, self.epoch, after,
                count=min(s.buffer, MAX_HISTORY_PAGE),
                pipeline=split_physical(s.frontier_of(self.view))[0],
            )  # fmt: skip
        except HistoryGone as gone:
            self.history = None
            return await self._reset(gone.code, f"cannot resume: {gone.message}")
        out = [FeedDelta(page.epoch, d).frame for d in page.deltas]
        self.position = position_tuple(page.read_to)
        if page.complete:
            self.history = None
            self.progress_position = position_tuple(page.progress)
        else:
            self.history = page.read_to
        if out:
            self.last_event_id = out[-1].id
        return out

    async def next_frames(self) -> list[frames.Frame]:
        """The frames ready now, possibly none: the next page of history while a resume has
        some left, else what the hub buffered. Raises ``SlowConsumer`` if the buffer
        overflowed."""
        sub = self._taking()
        if self.history is not None:
            return await self._history_page()
        items, progress = sub.take()
        out = await self._frames_of(items)
        if progress is not None and self.accept_progress(progress):
            out.append(progress.frame)
        for f in out:
            if f.id is not None:
                self.last_event_id = f.id
        return out

    async def _frames_of(self, items: list[Item]) -> list[frames.Frame]:
        """The frames of items the hub buffered: a reset and a snapshot when the store or the
        view's version changed, else each delta's frame (``_take``)."""
        out: list[frames.Frame] = []
        for item in items:
            if isinstance(item, EpochChanged):
                if item.epoch != self.epoch:
                    out.extend(await self._reset(*replaced(self.epoch, item.epoch)))
            else:
                frame = self._take(item)
                if frame is not None:
                    out.append(frame)
        return out

    def _take(self, item: FeedDelta) -> frames.Frame | None:
        """A live delta's frame, if it is the next to send."""
        if not self.is_next(item):
            return None
        self.sent(item)
        return item.frame

    def close(self) -> None:
        if self.subscriber is not None:
            self.source.hub.detach(self.subscriber)


def replaced(before: str, now: str) -> tuple[str, str]:
    """The reset code and sentence for a subscription of epoch ``before`` that the feed now
    reads in ``now``: the store was replaced, or a new version of the view serves readers."""
    if split_epoch(before)[0] != split_epoch(now)[0]:
        return "epoch_changed", "the store was replaced."
    return "view_replaced", "a new version of the view serves readers now; here is its snapshot."
