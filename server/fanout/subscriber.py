"""The hub's side of one subscription: a bounded buffer, or a sink that takes items at once."""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Callable
from typing import Protocol

from liveviews.gateway.fanout.items import FeedDelta, FeedRun, Item, Progress


class SubscriberState(enum.Enum):
    ATTACHED = "attached"
    OVERFLOWED = "overflowed"
    CLOSED = "closed"


class Sink(Protocol):
    """Takes a subscriber's items as they come, instead of its buffer (``Subscriber.sink``)."""

    def deliver(self, item: Item) -> bool:
        """Hand ``item`` on; False if the subscriber fell too far behind to take it."""
        ...

    def deliver_run(self, run: FeedRun) -> bool:
        """Hand on every delta of ``run``; False if the subscriber fell too far behind."""
        ...

    def deliver_progress(self, progress: Progress) -> None: ...


class Subscriber:
    """The hub's side of one subscription: a bounded buffer, or a sink that takes items at once.

    Its reader waits with ``wait()``; one future is made per wait, not one event per subscriber.
    A reader that keeps no task waiting is called back instead (``on_wake``). A reader of the
    log feed (``liveviews.gateway.feed.log``) has one of no hub, for the same state and wake-ups,
    so that its sender treats it as a subscription's.
    """

    __slots__ = ("view", "key", "frontier_name", "capacity", "buffer", "progress", "state",
                 "sink", "woken", "on_wake", "_waiter", "hub", "cohort", "shared",
                 "wants", "counted")  # fmt: skip

    def __init__(
        self,
        view: str,
        key: str,
        capacity: int,
        frontier_name: str,
        hub: Owner | None = None,
        shared: bool = True,
    ) -> None:
        self.view = view
        self.key = key
        """The key, or for a subscriber of a prefix (``Hub.attach_prefix``) the prefix."""
        self.shared = shared
        """Are its frames the key's own, which its cohort shares? Not for a query's."""
        self.frontier_name = frontier_name
        self.capacity = capacity
        self.buffer: list[Item] = []
        self.progress: Progress | None = None
        self.state = SubscriberState.ATTACHED
        self.sink: Sink | None = None
        self.woken = False
        self.on_wake: Callable[[], None] | None = None
        self._waiter: asyncio.Future[None] | None = None
        self.hub = hub
        self.cohort: Cohort | None = None
        """The cohort this subscriber is in, if any; the hub hands it nothing itself then."""
        self.counted = True
        """Does its overflow count as a slow consumer of its own? A group member's does not:
        the group's end counts once (``liveviews.gateway.live.sender``)."""
        self.wants: Callable[[list[FeedDelta]], bool] | None = None
        """For a prefix's subscriber: does it want a key's deltas of one read? One that says no
        (a filter's, when none of them changes its rows) is neither woken nor owed a frontier
        for them."""

    def offer(self, item: Item) -> bool:
        if self.state is not SubscriberState.ATTACHED:
            return False
        if self.sink is not None:
            if self.sink.deliver(item):
                return True
            self.overflow()
            return False
        if len(self.buffer) >= self.capacity:
            self.overflow()
            return False
        self.buffer.append(item)
        self.wake()
        return True

    def offer_run(self, run: FeedRun) -> bool:
        """``offer`` for each delta of ``run``, which a sink takes in one go."""
        if self.state is not SubscriberState.ATTACHED:
            return False
        if self.sink is not None:
            if self.sink.deliver_run(run):
                return True
            self.overflow()
            return False
        if len(self.buffer) + len(run.items) > self.capacity:
            self.overflow()
            return False
        self.buffer.extend(run.items)
        self.wake()
        return True

    def offer_progress(self, progress: Progress) -> None:
        if self.state is not SubscriberState.ATTACHED:
            return
        if self.sink is not None:
            self.sink.deliver_progress(progress)
            return
        self.progress = progress
        self.wake()

    def overflow(self) -> None:
        """The subscription fell too far behind: its reader ends it (the slow-consumer policy)."""
        self.state = SubscriberState.OVERFLOWED
        self.buffer.clear()  # it will resume from the store; nothing buffered is needed
        self.wake()

    def hand_back(self, item: Item) -> None:
        """A sink that cannot take ``item`` itself (a reset reads the store) gives the
        subscriber back to its reader, with ``item`` buffered."""
        self.sink = None
        self.buffer.append(item)
        self.wake()

    def wake(self) -> None:
        self.woken = True
        if self.cohort is not None and self.hub is not None:
            self.hub.unsettle(self)  # its reader will look at its own cursor
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
        if self.on_wake is not None:
            self.on_wake()

    async def wait(self) -> None:
        """Until ``wake()`` was called since the last ``take()`` (or ``clear()``)."""
        if self.woken:
            return
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    def clear(self) -> None:
        self.woken = False

    def take(self) -> tuple[list[Item], Progress | None]:
        items, self.buffer = self.buffer, []
        progress, self.progress = self.progress, None
        self.woken = False
        return items, progress


class Owner(Protocol):
    """What a subscriber and its sender ask of the hub that holds it
    (``liveviews.gateway.fanout.hub.Hub``)."""

    def settle(self, sub: Subscriber) -> None:
        """``sub`` is up to date: let it join its key's cohort once in step."""
        ...

    def unsettle(self, sub: Subscriber) -> None:
        """Take ``sub`` out of its cohort, its cursor now its own."""
        ...

    def drop(self, sub: Subscriber) -> None:
        """Forget ``sub``, which overflowed: counted once as a slow consumer."""
        ...


class Cohort(Protocol):
    """Subscribers of one (view, key) in step: each was sent the same frames, so each takes the
    next item the same way (``liveviews.gateway.fanout.cohort.Cohort``)."""

    last_write: float
    """When the cohort last wrote to its members (the ticker's clock)."""

    def __len__(self) -> int: ...

    def admit(self, sub: Subscriber) -> bool:
        """Take ``sub`` in if it is in step with the members (the first one always is)."""
        ...

    def remove(self, sub: Subscriber) -> None:
        """Let ``sub`` go, its own cursor now the cohort's."""
        ...

    def deliver(self, items: list[FeedDelta], run: FeedRun | None) -> list[Subscriber]:
        """Write a key's ``items`` of one read (``run`` if they go as one) to every member; the
        members it could not write to leave, their cursors as before the items."""
        ...

    def deliver_progress(self, progress: Progress) -> list[Subscriber]:
        """The same for a frontier on its own."""
        ...
