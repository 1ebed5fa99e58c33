"""A group of subscriptions released together, so that a page never shows half a change.

A group is a ``FrameSource`` of its own (one sender, one stream of frames) made of member
subscriptions, one per (view, key). Each member reads as a key's subscription does (a snapshot,
or the deltas it missed, then the live deltas), but its frames are held, each with what it
covers: a live delta the micro-batch that wrote it, a snapshot or a page of history the first
cut appended after it was read. When the process's tracker (``liveviews.gateway.feed.cuts``)
tells the group that a cut is reached, every member's frames up to the cut go out as one
``group`` frame with the cut as the frontier every member reflects: the client applies it
whole, and moves from one consistent state to the next. Members' own ``progress`` frames are
not sent; the group frame carries the frontier.

Why a snapshot is at or before the next cut: the cut holds every log partition's head at the
instant it is appended, after the snapshot was read; every batch written before then ended at
or before those heads. The snapshot plus the member's deltas of the batches up to the cut's is
therefore the view at the cut.
"""

from __future__ import annotations

from collections.abc import Iterable

from liveviews.changes.topic import split_physical
from liveviews.gateway.errors import SLOW_CONSUMER, SlowConsumer, Unprocessable
from liveviews.gateway.fanout.cursor import Cursor
from liveviews.gateway.fanout.items import EpochChanged
from liveviews.gateway.fanout.lane import Wanted
from liveviews.gateway.fanout.subscriber import Subscriber, SubscriberState
from liveviews.gateway.fanout.subscription import Source, Subscription, replaced
from liveviews.gateway.feed.cuts import Cuts, Release
from liveviews.gateway.wire import frames
from liveviews.gateway.wire.eventid import EventId, group_event_id

Held = tuple[frames.Frame, int, bool]
"""A member's frame, and what covers it: a batch of its pipeline (``True``), or the number of
the first cut appended after it was read (``False``)."""


class Member(Subscription):
    """One (view, key) of a group: a key's subscription whose frames wait for a cut."""

    __slots__ = ("sub_id", "held", "released_id")

    direct = False

    def __init__(self, source: Source, sub_id: str, view: str, key: str,
                 resume: EventId | None) -> None:  # fmt: skip
        super().__init__(source, view, key, resume)
        self.sub_id = sub_id
        self.held: list[Held] = []
        self.released_id = str(resume) if resume else None
        """Its last frame's id the client was sent: where it resumes from."""

    def _attach(self) -> None:
        # Never in the key's cohort: its frames wait for the group's cut.
        self.subscriber = self.source.hub.attach(self.view, self.key, self.source.buffer,
                                                 shared=False)  # fmt: skip
        self.subscriber.counted = False

    @property
    def frontier_name(self) -> str:
        return self.source.frontier_of(self.view)

    def hold_first(self, out: list[frames.Frame], cut: int) -> None:
        self.held.extend((f, cut, False) for f in out)

    async def take(self, cut: int) -> None:
        """Hold what the hub buffered; frames read from the store wait for cut ``cut``."""
        sub = self._taking()
        if self.history is not None:
            self.hold_first(await self._history_page(), cut)
            return
        items, _ = sub.take()  # a member's own frontier is not sent: the group's is
        for item in items:
            if isinstance(item, EpochChanged):
                if item.epoch != self.epoch:
                    self.hold_first(await self._reset(*replaced(self.epoch, item.epoch)), cut)
            elif self.is_next(item):
                self.sent(item)
                self.held.append((item.frame, item.delta.batch, True))

    def releasable(self, release: Release) -> int:
        """How many of its held frames ``release`` covers, in order."""
        batch = release.batches.get(self.frontier_name)
        n = 0
        for _, covered, is_batch in self.held:
            if is_batch:
                if batch is None or covered > batch:
                    break
            elif covered > release.seq:
                break
            n += 1
        return n

    def waits_for_first(self, release: Release) -> bool:
        """Are frames read from the store at the head of what it holds, not covered yet?"""
        return bool(self.held) and not self.held[0][2] and self.held[0][1] > release.seq


class Group:
    """Member subscriptions released together at cuts: one stream, one ``group`` frame per
    cut that moves it. Its subscriber belongs to no hub; each member's wakes it."""

    __slots__ = ("source", "cuts", "group_id", "members", "subscriber", "last_event_id",
                 "ready", "frontier", "waited")  # fmt: skip

    history: str | None = None
    cursor: Cursor | None = None

    def __init__(self, source: Source, cuts: Cuts, group_id: str,
                 members: list[tuple[str, str, str, EventId | None]]) -> None:  # fmt: skip
        if cuts.refused is not None:
            raise Unprocessable(cuts.refused, code="groups_unavailable")
        self.source = source
        self.cuts = cuts
        self.group_id = group_id
        self.members = [Member(source, sub, view, key, resume)
                        for sub, view, key, resume in members]  # fmt: skip
        self.subscriber: Subscriber | None = None
        self.last_event_id: str | None = self._event_id()
        self.ready: Release | None = None
        """The newest reached cut not released yet."""
        self.frontier = ""
        """The last group frame's frontier, as sent."""
        self.waited = False

    def __str__(self) -> str:
        return f"group {self.group_id} of {len(self.members)}"

    def pipelines(self) -> Iterable[str]:
        return {split_physical(m.frontier_name)[0] for m in self.members}

    def _event_id(self) -> str | None:
        ids = {m.sub_id: m.released_id for m in self.members if m.released_id is not None}
        return group_event_id(ids) if ids else None

    async def start(self) -> list[frames.Frame]:
        """Start every member; their first frames wait for the first cut appended after."""
        self.subscriber = Subscriber("", self.group_id, self.source.buffer, "", shared=False)
        try:
            for m in self.members:
                first = await m.start()
                m.hold_first(first, self.cuts.sent + 1)
                assert m.subscriber is not None
                m.subscriber.on_wake = self.subscriber.wake
        except BaseException:
            self.close()
            raise
        self.cuts.join(self)
        self.cuts.want()
        return []

    def release(self, release: Release) -> None:
        self.ready = release
        if self.subscriber is not None:
            self.subscriber.wake()

    def wait_for(self, wanted: Wanted) -> None:
        """The client waits for its writes: any cut appended from now on covers them."""
        self.waited = True
        self.cuts.want()

    def has_frames(self) -> bool:
        if self.ready is not None:
            return True
        return any(m.subscriber is not None and (m.subscriber.buffer or m.history is not None)
                   for m in self.members)  # fmt: skip

    async def next_frames(self) -> list[frames.Frame]:
        """Hold what the members were handed; at a reached cut, the group frame it releases."""
        sub = self.subscriber
        assert sub is not None
        if sub.state is SubscriberState.OVERFLOWED:
            raise SlowConsumer(SLOW_CONSUMER, last_event_id=self.last_event_id)
        for m in self.members:
            try:
                await m.take(self.cuts.sent + 1)
            except SlowConsumer:  # a member's hub buffer overflowed: the group resumes
                sub.overflow()
                raise SlowConsumer(SLOW_CONSUMER, last_event_id=self.last_event_id) from None
        # Live deltas only: the deltas a resumed member missed are its first frames, written
        # however many, as a key's are; counted here, a group far behind could never resume.
        if sum(live for m in self.members for _, _, live in m.held) > sub.capacity:
            sub.overflow()  # the group is too far behind its client: it resumes from its id
            raise SlowConsumer(SLOW_CONSUMER, last_event_id=self.last_event_id)
        out = self._released()
        if any(m.held for m in self.members):
            self.cuts.want()
        return out

    def _released(self) -> list[frames.Frame]:
        release, self.ready = self.ready, None
        if release is None or any(m.waits_for_first(release) for m in self.members):
            return []  # a member's snapshot is newer than this cut: the next one releases all
        released: list[tuple[str, frames.Frame]] = []
        for m in self.members:
            n = m.releasable(release)
            released += [(m.sub_id, f) for f, _, _ in m.held[:n]]
            for f, _, _ in m.held[:n]:
                if f.id is not None:
                    m.released_id = f.id
            del m.held[:n]
        frontier = dict(release.cut.positions)
        data = frames.progress(frontier).data.decode()
        if not released and data == self.frontier and not self.waited:
            return []
        self.frontier, self.waited = data, False
        self.last_event_id = self._event_id()
        return [frames.group(released, frontier, self.last_event_id)]

    def close(self) -> None:
        self.cuts.leave(self)
        for m in self.members:
            m.close()
