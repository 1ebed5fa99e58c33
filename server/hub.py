"""In-process fan-out: the change feed hands each delta to the subscribers of its (view, key).

A ``Subscriber`` is one subscription's bounded buffer. The hub appends to it without ever
waiting, so one slow client cannot hold up the feed or anyone else: when a buffer is full the
subscriber is marked ``overflowed``, detached, and its reader ends the subscription with its
last delivered event id (the slow-consumer policy of docs/PROTOCOL.md). Memory is therefore
bounded by ``subscribers x buffer`` references to frames that are shared between subscribers.

Progress is not buffered: a subscriber keeps only the newest one, which replaces older ones.
Everything here runs on the event loop's thread and never awaits, so a delta batch is handed
out atomically with respect to a subscriber registering.
"""

from __future__ import annotations

import asyncio
import enum
from collections import deque
from dataclasses import dataclass, field
from functools import cached_property

from server import frames
from server.eventid import EventId
from server.metrics import Metrics
from streaming.changes import Delta


@dataclass(eq=False)
class FeedDelta:
    """A delta as read by the feed in ``epoch``; its frame is encoded once, on first use."""

    epoch: str
    delta: Delta

    @cached_property
    def frame(self) -> frames.Frame:
        d = self.delta
        return frames.delta(d.view, d.key, d.ops, str(EventId(self.epoch, d.id)))


@dataclass(frozen=True)
class EpochChanged:
    """The feed now reads a store of another epoch: older positions mean nothing there."""

    epoch: str


@dataclass(frozen=True)
class Progress:
    """The frontier after the ``lv:progress`` entry ``entry``, as one shared frame."""

    epoch: str
    entry: str
    frame: frames.Frame


Item = FeedDelta | EpochChanged


class SubscriberState(enum.Enum):
    ATTACHED = "attached"
    OVERFLOWED = "overflowed"
    CLOSED = "closed"


@dataclass(eq=False)
class Subscriber:
    """The hub's side of one subscription: a bounded buffer and an event to wake its reader."""

    view: str
    key: str
    capacity: int
    buffer: deque[Item] = field(default_factory=deque)
    progress: Progress | None = None
    state: SubscriberState = SubscriberState.ATTACHED
    wake: asyncio.Event = field(default_factory=asyncio.Event)

    def offer(self, item: Item) -> bool:
        if self.state is not SubscriberState.ATTACHED:
            return False
        if len(self.buffer) >= self.capacity:
            self.state = SubscriberState.OVERFLOWED
            self.buffer.clear()  # it will resume from the store; nothing buffered is needed
            self.wake.set()
            return False
        self.buffer.append(item)
        self.wake.set()
        return True

    def take(self) -> tuple[list[Item], Progress | None]:
        items = list(self.buffer)
        self.buffer.clear()
        progress, self.progress = self.progress, None
        self.wake.clear()
        return items, progress


class Hub:
    """Subscribers by (view, key); the change feed is its only publisher."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics
        self.by_key: dict[tuple[str, str], set[Subscriber]] = {}
        self.all: set[Subscriber] = set()

    def attach(self, view: str, key: str, capacity: int) -> Subscriber:
        sub = Subscriber(view, key, capacity)
        self.by_key.setdefault((view, key), set()).add(sub)
        self.all.add(sub)
        self.metrics.subscriptions = len(self.all)
        return sub

    def detach(self, sub: Subscriber) -> None:
        if sub.state is SubscriberState.ATTACHED:
            sub.state = SubscriberState.CLOSED
        self._forget(sub)

    def _forget(self, sub: Subscriber) -> None:
        if sub not in self.all:
            return
        self.all.discard(sub)
        peers = self.by_key.get((sub.view, sub.key))
        if peers is not None:
            peers.discard(sub)
            if not peers:
                del self.by_key[(sub.view, sub.key)]
        self.metrics.subscriptions = len(self.all)

    def publish(self, epoch: str, deltas: list[Delta]) -> None:
        overflowed: list[Subscriber] = []
        for d in deltas:
            self.metrics.deltas_in += 1
            subs = self.by_key.get((d.view, d.key))
            if not subs:
                continue
            item = FeedDelta(epoch, d)
            for sub in subs:
                if not sub.offer(item):
                    overflowed.append(sub)
        self._drop(overflowed)

    def progress(self, progress: Progress) -> None:
        for sub in self.all:
            sub.progress = progress
            sub.wake.set()

    def epoch_changed(self, epoch: str) -> None:
        notice = EpochChanged(epoch)
        self._drop([sub for sub in list(self.all) if not sub.offer(notice)])

    def _drop(self, overflowed: list[Subscriber]) -> None:
        for sub in overflowed:
            if sub.state is SubscriberState.OVERFLOWED and sub in self.all:
                self.metrics.slow_consumers += 1
            self._forget(sub)
