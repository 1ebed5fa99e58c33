"""In-process fan-out: the change feed hands each delta to the subscribers of its (view, key).

A ``Subscriber`` is one subscription's bounded buffer. The hub appends to it without ever
waiting, so one slow client cannot hold up the feed or anyone else: when a buffer is full the
subscriber is marked ``overflowed``, detached, and its reader ends the subscription with its
last delivered event id (the slow-consumer policy of docs/PROTOCOL.md). Memory is therefore
bounded by ``subscribers x buffer`` references to frames that are shared between subscribers.

Progress is not buffered: a subscriber keeps only the newest one, which replaces older ones.
Everything here runs on the event loop's thread and never awaits, so a delta batch is handed
out atomically with respect to a subscriber registering.

Subscribers of one key that were sent the same frames and write straight to their connections
form the key's ``Cohort`` (``liveviews.gateway.fanout.cohort``): the hub hands each item to the
cohort once, and it has every member written to in one loop, with one cursor for all. A member the
cohort cannot write to as the others (a full socket, a closing connection) is given back to the hub,
with its own cursor as it was before the item, and takes the item the usual way; a woken
subscriber leaves its cohort, since its reader looks at its cursor. A subscriber asks to join
(``Hub.settle``) when it is up to date, and joins once its cursor is the cohort's.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

from liveviews.changes.topic import VIEWS_FRONTIER, Delta, split_physical
from liveviews.gateway.fanout.items import EpochChanged, FeedDelta, FeedRun, Progress
from liveviews.gateway.fanout.lane import INF, Lane, Wanted, add_wait, covers, end_waits
from liveviews.gateway.fanout.prefixes import Prefixes
from liveviews.gateway.fanout.subscriber import Cohort, Subscriber, SubscriberState
from liveviews.gateway.metrics import Metrics
from liveviews.pipeline.versions import composite_epoch

K = TypeVar("K")


class Hub:
    """Subscribers by (view, key); the change feed is its only publisher.

    A subscriber follows the frontier ``frontier_of(view)``: that of the pipeline writing its
    view, which moves with that pipeline's micro-batches alone. Every subscriber of a view
    follows the same one, so a frontier riding with a delta suits each taker of the delta.
    """

    def __init__(
        self,
        metrics: Metrics,
        progress_interval: float = 0.0,
        frontier_of: Callable[[str], str] = lambda view: VIEWS_FRONTIER,
        new_cohort: Callable[[], Cohort] | None = None,
        on_wait: Callable[[str, Wanted], None] = lambda frontier, wanted: None,
        quiet_interval: float | None = None,
    ) -> None:
        self.metrics = metrics
        self.on_wait = on_wait
        """Told each wait no frontier read answered yet (``liveviews.gateway.feed.wants``)."""
        self.by_key: dict[tuple[str, str], set[Subscriber]] = {}
        """Subscribers by key that are in no cohort."""
        self.cohorts: dict[tuple[str, str], Cohort] = {}
        self.new_cohort = new_cohort
        self.settling: dict[tuple[str, str], set[Subscriber]] = {}
        """Subscribers that asked to join their key's cohort and are not in step yet."""
        self._handing_out = False
        self.all: set[Subscriber] = set()
        self.interval = progress_interval
        self.quiet_interval = max(progress_interval, quiet_interval or 0.0)
        """How often a subscriber whose key did not change is passed the newest frontier."""
        self.frontier_of = frontier_of
        self.lanes: dict[str, Lane] = {}
        self.prefixes = Prefixes()
        """Subscribers of the keys of a view with a prefix (``attach_prefix``)."""

    def _lane(self, frontier_name: str) -> Lane:
        lane = self.lanes.get(frontier_name)
        if lane is None:
            lane = self.lanes[frontier_name] = Lane()
        return lane

    def attach(self, view: str, key: str, capacity: int, shared: bool = True) -> Subscriber:
        """A subscriber of (``view``, ``key``); one that is not ``shared`` makes frames of its
        own (a window of the key) and never joins the key's cohort."""
        sub = Subscriber(view, key, capacity, self.frontier_of(view), self, shared)
        first = not self._followed((view, key))
        self.by_key.setdefault((view, key), set()).add(sub)
        self._add(sub, first)
        return sub

    def attach_prefix(self, view: str, prefix: str, capacity: int) -> Subscriber:
        """A subscriber of every key of ``view`` that starts with ``prefix``: handed each delta
        of such a key, into its buffer, as a key's subscriber is."""
        sub = Subscriber(view, prefix, capacity, self.frontier_of(view), self, shared=False)
        first = not self._followed((view, prefix))
        self.prefixes.add(sub)
        self._add(sub, first)
        return sub

    def _add(self, sub: Subscriber, first: bool) -> None:
        self.all.add(sub)
        lane = self._lane(sub.frontier_name)
        lane.subscribers.add(sub)
        if first:
            # Its snapshot carries a frontier: for the quiet rhythm, the first subscriber of a
            # key counts as passed one now, so the keys of subscribers that arrive together (a
            # gateway's restart, 5k streams in a second) are not all written to at the next
            # sweep, a stall of ~50 ms, but each a quiet interval after its own snapshot. Not
            # for a key already followed: its other subscribers would wait longer.
            lane.joined[(sub.view, sub.key)] = asyncio.get_running_loop().time()
        self.metrics.subscriptions = len(self.all)

    def wait(self, sub: Subscriber, wanted: Wanted) -> None:
        """``sub``'s client waits for its view to reflect ``wanted`` (read-your-writes): the
        first frontier read that covers them goes to ``sub`` at once, not after the progress
        interval. Still after the deltas it covers: it is handed out after the read's deltas,
        through the subscriber's own path."""
        if sub not in self.all:
            return
        lane = self._lane(sub.frontier_name)
        latest = lane.latest
        if latest is not None and covers(latest, wanted):
            self._answer(sub, latest)
            return
        add_wait(lane.waits.setdefault(sub, []), wanted)
        self.on_wait(sub.frontier_name, wanted)

    def _answer_waits(self, lane: Lane, progress: Progress) -> None:
        for sub in end_waits(lane, progress):
            self._answer(sub, progress)

    def _answer(self, sub: Subscriber, progress: Progress) -> None:
        if sub.cohort is not None:
            self.unsettle(sub)  # a frame for it alone: its own cursor from here
        sub.offer_progress(progress)
        if sub.state is SubscriberState.OVERFLOWED:
            self.drop(sub)
        elif sub.sink is not None:
            self.settle(sub)  # back in its cohort once the others are sent this frontier too

    def detach(self, sub: Subscriber) -> None:
        if sub.state is SubscriberState.ATTACHED:
            sub.state = SubscriberState.CLOSED
        self._forget(sub)

    def settle(self, sub: Subscriber) -> None:
        """``sub`` is up to date and its sink takes items at once: let it join its key's cohort
        as soon as its cursor is the cohort's (now, or after the hand-out under way)."""
        if (self.new_cohort is None or sub.cohort is not None or not sub.shared
                or sub not in self.all):  # fmt: skip
            return
        key = (sub.view, sub.key)
        self.settling.setdefault(key, set()).add(sub)
        if not self._handing_out:
            self._admit(key)

    def unsettle(self, sub: Subscriber) -> None:
        """Take ``sub`` out of its cohort, its cursor now its own."""
        cohort = sub.cohort
        if cohort is None:
            return
        cohort.remove(sub)
        sub.cohort = None
        key = (sub.view, sub.key)
        if not cohort and self.cohorts.get(key) is cohort:
            del self.cohorts[key]
        self.by_key.setdefault(key, set()).add(sub)

    def _admit(self, key: tuple[str, str]) -> None:
        waiting = self.settling.get(key)
        if not waiting or self.new_cohort is None:
            return
        cohort = self.cohorts.get(key)
        if cohort is None:
            cohort = self.new_cohort()
        loose = self.by_key.get(key, set())
        for sub in list(waiting):
            if sub.state is not SubscriberState.ATTACHED or sub not in self.all:
                waiting.discard(sub)
            elif cohort.admit(sub):
                waiting.discard(sub)
                sub.cohort = cohort
                loose.discard(sub)
        if not waiting:
            del self.settling[key]
        if not loose:
            self.by_key.pop(key, None)
        if cohort:
            self.cohorts[key] = cohort

    def _forget(self, sub: Subscriber) -> None:
        if sub not in self.all:
            return
        self.unsettle(sub)
        self.all.discard(sub)
        lane = self._lane(sub.frontier_name)
        lane.subscribers.discard(sub)
        lane.waits.pop(sub, None)
        # A subscriber is in one of these (a prefix's, or its key's), never in both.
        self.prefixes.discard(sub)
        _discard(self.settling, (sub.view, sub.key), sub)
        _discard(self.by_key, (sub.view, sub.key), sub)
        if (sub.view, sub.key) in lane.joined and not self._followed((sub.view, sub.key)):
            del lane.joined[(sub.view, sub.key)]
        self.metrics.subscriptions = len(self.all)

    def _followed(self, key: tuple[str, str]) -> bool:
        """Has (view, key), or (view, prefix), a subscriber?"""
        return bool(self.by_key.get(key) or key in self.cohorts or self.settling.get(key)
                    or self.prefixes.followed(*key))  # fmt: skip

    def publish(self, epoch: str, deltas: list[Delta], progress: Iterable[Progress] = ()) -> None:
        """Hand out one read of the change feed: its deltas, then the frontiers that cover them.

        A key's subscribers handed deltas get the read's frontier in the same write as the last
        of them (riding: bytes, not a system call) unless they were passed a frontier within
        ``interval``; then they are owed it, and are passed the newest frontier on its own one
        and a half intervals later, unless a read brings it to them first. A subscriber whose
        key did not change is passed the newest frontier at most once per ``quiet_interval``:
        at 5k subscribers over 50 keys, a frame to every one of them four times a second cost
        more system calls than the deltas themselves (docs/performance/fanout.md). A client
        waiting for its writes asks for its frontier (``wait``) and is passed it at once.

        Progress only follows the deltas it covers (they were published before it), so holding
        it back never breaks read-your-writes; it only coalesces frames nobody needs twice. A
        key's deltas in one read go to each of its subscribers together (``FeedRun``): a stream
        writes them in one system call, so a read that brings several, as one does once the
        gateway falls behind, costs each stream one write, not one per delta.
        """
        # A frontier no subscriber follows is dropped: a later subscriber reads its frontier
        # with its snapshot. (Chirp's views follow their pipelines', not every view's.)
        progress = [p for p in progress if self._lane(p.frontier_name).subscribers]
        read = {p.frontier_name: p for p in progress}
        now = asyncio.get_running_loop().time()
        self.metrics.deltas_in += len(deltas)
        by_key: dict[tuple[str, str], list[Delta]] = {}
        for d in deltas:
            by_key.setdefault((d.view, d.key), []).append(d)
        overflowed: list[Subscriber] = []
        with self._handing_out_items():
            for (view, key), key_deltas in by_key.items():
                cohort = self.cohorts.get((view, key))
                watchers = self.prefixes.watchers(view, key) if self.prefixes else []
                if cohort is None and not self.by_key.get((view, key)) and not watchers:
                    continue
                frontier_name = self.frontier_of(view)
                lane = self._lane(frontier_name)
                items = [FeedDelta(composite_epoch(epoch, d.namespace), d) for d in key_deltas]
                if watchers:
                    watchers = [w for w in watchers if w.wants is None or w.wants(items)]
                riding = read.get(frontier_name)
                last = lane.rode.get((view, key), -INF)
                if riding is not None and now >= last + self.interval:
                    items[-1].progress = riding
                    lane.rode[(view, key)] = now
                    lane.changed.pop((view, key), None)
                else:
                    lane.changed[(view, key)] = lane.reads
                lane.changed_watchers.update(watchers)
                run = FeedRun(items) if len(items) > 1 and _ascending(items) else None
                for sub in watchers:
                    if not all(sub.offer(item) for item in items):
                        overflowed.append(sub)
                if cohort is not None:
                    for sub in cohort.deliver(items, run):
                        self._given_back(sub, cohort)
                subs = self.by_key.get((view, key))
                if not subs:
                    continue
                if run is not None:
                    for sub in subs:
                        if not sub.offer_run(run):
                            overflowed.append(sub)
                    continue
                for item in items:
                    for sub in subs:
                        if not sub.offer(item):
                            overflowed.append(sub)
            self._drop(overflowed)
        for p in progress:
            lane = self._lane(p.frontier_name)
            lane.pending = lane.latest = p
            lane.reads += 1
            if lane.waits:
                self._answer_waits(lane, p)
            if now >= lane.swept + self.quiet_interval / 4:  # a sweep is due: with this read
                if lane.flush_at is not None:
                    lane.flush_at.cancel()
                self._flush_progress(lane)
            else:
                self._flush_later(lane)

    def _flush_later(self, lane: Lane) -> None:
        """A timer for the next flush: an owed key's one and a half progress intervals after
        its last frontier (a read may bring it one first), or the next quiet sweep."""
        if lane.pending is None:
            return
        loop = asyncio.get_running_loop()
        now = loop.time()
        at = lane.swept + self.quiet_interval / 4
        if lane.changed_watchers:
            at = min(at, now + self.interval * 1.5)
        ready = [k for k, mark in lane.changed.items() if mark < lane.reads]
        if ready:  # the others wait for a frontier read after their deltas
            first = min(lane.rode.get(k, -INF) for k in ready)
            at = min(at, first + self.interval * 1.5)
        at = max(at, now)
        if lane.flush_at is not None:
            if lane.flush_when <= at:
                return
            lane.flush_at.cancel()
        lane.flush_at = loop.call_at(at, self._flush_progress, lane)
        lane.flush_when = at

    def close(self) -> None:
        for lane in self.lanes.values():
            if lane.flush_at is not None:
                lane.flush_at.cancel()
                lane.flush_at = None

    def _flush_progress(self, lane: Lane) -> None:
        """Pass the newest frontier to the keys owed it and, when a sweep is due, to the keys
        passed none for a quiet interval; then time the next flush. Sweeps come four times per
        quiet interval, each for the keys due then, so the frames to quiet keys are spread out
        rather than written to every stream at once."""
        lane.flush_at = None
        progress = lane.latest
        if progress is None or lane.pending is None:
            return  # the newest frontier went to every subscriber already
        now = asyncio.get_running_loop().time()
        sweep = now >= lane.swept + self.quiet_interval / 4
        rode = lane.rode
        # An owed key is passed the frontier once it had none for one and a half intervals;
        # until then a read may still bring it one with its deltas.
        targets = {
            k
            for k, mark in lane.changed.items()
            if mark < lane.reads and rode.get(k, -INF) + self.interval * 1.5 <= now
        }
        watchers, lane.changed_watchers = lane.changed_watchers, set()
        for key in targets:
            del lane.changed[key]
        if sweep:
            lane.swept = now
            quiet_since = now - self.quiet_interval
            skipped = False
            joined = lane.joined
            keys = [k for k in self.cohorts if self.frontier_of(k[0]) == progress.frontier_name]
            keys += self._loose_keys(progress.frontier_name)
            for key in keys:
                if key in targets or key in lane.changed:  # owed: passed by that rule
                    continue
                if rode.get(key, -INF) > quiet_since or joined.get(key, -INF) > quiet_since:
                    skipped = True
                else:
                    targets.add(key)
            if not skipped and not lane.changed:  # every subscriber has the newest now
                lane.pending = None
        for key in targets:
            rode[key] = now
        if sweep:  # entries this old say no more than no entry does, but for owed keys
            old = min(now - self.quiet_interval, now - self.interval * 1.5)
            lane.rode = {k: at for k, at in rode.items() if at > old or k in lane.changed}
        overflowed = []
        with self._handing_out_items():
            for key in targets:
                cohort = self.cohorts.get(key)
                if cohort is not None:
                    for sub in cohort.deliver_progress(progress):
                        self._given_back(sub, cohort)
            # After the cohorts: a member one could not write to takes the frontier this way.
            loose = self._loose_of(targets, progress.frontier_name)
            for sub in itertools.chain(loose, watchers):
                if sub.cohort is not None or sub not in self.all:
                    continue
                sub.offer_progress(progress)
                if sub.state is SubscriberState.OVERFLOWED:
                    overflowed.append(sub)
            self._drop(overflowed)
        self._flush_later(lane)

    def _loose_keys(self, frontier_name: str) -> list[tuple[str, str]]:
        """The keys (and prefixes) with a subscriber in no cohort that follows ``frontier_name``.

        Every subscriber is in one of a cohort, ``by_key`` and ``prefixes``: looking at those
        two, not at every subscriber of the lane, keeps a sweep's cost to the loose ones (a pass
        over 5k subscribers in cohorts took ~5 ms per sweep, docs/performance/fanout.md)."""
        groups = itertools.chain(self.by_key.items(), self.prefixes.groups())
        return [key for key, subs in groups
                if any(s.frontier_name == frontier_name for s in subs)]  # fmt: skip

    def _loose_of(self, keys: Iterable[tuple[str, str]], frontier_name: str) -> list[Subscriber]:
        """The subscribers of ``keys`` (or prefixes) in no cohort that follow ``frontier_name``."""
        return [sub for key in keys
                for subs in (self.by_key.get(key, ()), self.prefixes.of(*key))
                for sub in subs if sub.frontier_name == frontier_name]  # fmt: skip

    @contextlib.contextmanager
    def _handing_out_items(self) -> Iterator[None]:
        """While items are handed out, subscribers that ask to join a cohort wait; after it,
        each that is in step joins."""
        self._handing_out = True
        try:
            yield
        finally:
            self._handing_out = False
        for key in list(self.settling):
            self._admit(key)

    def _given_back(self, sub: Subscriber, cohort: Cohort) -> None:
        """A member ``cohort`` could not write to as the others: it takes items the usual
        way, and joins again once it is in step (its socket took what it was sent)."""
        sub.cohort = None
        key = (sub.view, sub.key)
        if not cohort and self.cohorts.get(key) is cohort:
            del self.cohorts[key]
        self.by_key.setdefault(key, set()).add(sub)
        self.settling.setdefault(key, set()).add(sub)

    def epoch_changed(self, epoch: str) -> None:
        """Every subscriber: the store was replaced. Each is handed the epoch its view has
        now (the store's, with the version serving its view)."""
        notices: dict[str, EpochChanged] = {}
        overflowed = []
        for sub in list(self.all):
            name = self.frontier_of(sub.view)
            notice = notices.get(name)
            if notice is None:
                notice = notices[name] = EpochChanged(
                    composite_epoch(epoch, split_physical(name)[1])
                )
            if not sub.offer(notice):
                overflowed.append(sub)
        self._drop(overflowed)

    def views_replaced(self, views: set[str], epoch: str, frontier_name: str) -> None:
        """The subscribers of ``views``: a new version of them serves readers, in ``epoch``,
        and they follow its frontier from now on."""
        notice = EpochChanged(epoch)
        overflowed = []
        for sub in [s for s in self.all if s.view in views]:
            if sub.frontier_name != frontier_name:
                old = self._lane(sub.frontier_name)
                old.subscribers.discard(sub)
                old.waits.pop(sub, None)  # positions of the replaced version's frontier
                sub.frontier_name = frontier_name
                self._lane(frontier_name).subscribers.add(sub)
            if not sub.offer(notice):
                overflowed.append(sub)
        self._drop(overflowed)

    def _drop(self, overflowed: list[Subscriber]) -> None:
        for sub in overflowed:
            self.drop(sub)

    def drop(self, sub: Subscriber) -> None:
        """Forget ``sub``; one that overflowed counts once as a slow consumer."""
        if sub.state is SubscriberState.OVERFLOWED and sub in self.all and sub.counted:
            self.metrics.slow_consumers += 1
        self._forget(sub)


def _discard(groups: dict[K, set[Subscriber]], key: K, sub: Subscriber) -> None:
    """``sub`` out of its group ``key``, and the group out of ``groups`` once empty."""
    group = groups.get(key)
    if group is not None:
        group.discard(sub)
        if not group:
            del groups[key]


def _ascending(items: list[FeedDelta]) -> bool:
    """Are the positions of ``items`` ascending, as those of one shard's stream are?"""
    return all(a.position < b.position for a, b in itertools.pairwise(items))
