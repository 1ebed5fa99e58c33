"""Subscribers of one (view, key) in step: one cursor, one decision per item for all of them.

At 10k subscribers of one key, a delta is 10k deliveries of the same pre-encoded bytes. Each
sender taking it through its own path (its cursor's checks, the transport's state, the write,
the bookkeeping) spent ~3 µs of Python per delivery beside the system call, more than
nginx+nchan spends in C. The senders of a key that were sent the same frames, and whose sockets
take everything written to them at once, need none of that apiece: the cohort decides once
whether an item is next and whether its frontier rides along, has the members' transport write
it to all of them in one loop (``GroupWrite``), and moves its one cursor. A member whose
connection is closing, or whose socket does not take the whole write, leaves with the cursor it
had, so it takes the item through its own path, exactly as it would have without the cohort.

The hub owns cohorts (``liveviews.gateway.fanout.subscriber.Cohort``); this is the one kind it
makes. Which members' bytes and sockets these are is the transport's business
(``liveviews.gateway.live.sse``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, cast

from liveviews.gateway.fanout.cursor import Cursor
from liveviews.gateway.fanout.items import FeedDelta, FeedRun, Progress
from liveviews.gateway.fanout.subscriber import Subscriber, SubscriberState
from liveviews.gateway.metrics import Metrics


class Member(Protocol):
    """A sender that may join a cohort (``liveviews.gateway.live.sse.SseSender``)."""

    cursor: Cursor
    """The member's own cursor (its ``Subscription``), the cohort's again when it leaves."""
    last_write: float
    pending: int

    def writes_at_once(self) -> bool:
        """Does it write straight to its socket, with nothing queued, and take its items from
        the hub itself?"""
        ...


class GroupWrite(Protocol):
    def __call__(
        self, members: dict[Subscriber, Member], source: FeedDelta | FeedRun | Progress,
        with_progress: bool,
    ) -> list[tuple[Subscriber, bool]]:  # fmt: skip
        """Write ``source`` (and the frontier riding on it, if ``with_progress``) to every
        member; the members whose socket did not take all of it, each with whether it took
        some (the rest is then queued on its transport) or none."""
        ...


class Cohort:
    """Members of one key with one cursor: the hub's ``Cohort``."""

    __slots__ = ("members", "cursor", "last_write", "write", "clock", "metrics")

    def __init__(self, write: GroupWrite, clock: Callable[[], float], metrics: Metrics) -> None:
        self.members: dict[Subscriber, Member] = {}
        self.cursor = Cursor()
        self.write = write
        self.clock = clock
        self.last_write = clock()
        self.metrics = metrics

    def __len__(self) -> int:
        return len(self.members)

    def admit(self, sub: Subscriber) -> bool:
        sink = sub.sink
        if (
            sink is None
            or not getattr(sink, "joins_cohorts", False)
            or sub.state is not SubscriberState.ATTACHED
            or sub.woken
        ):
            return False
        member = cast(Member, sink)
        if not member.writes_at_once():
            return False
        if not self.members:
            member.cursor.copy_to(self.cursor)
            self.last_write = member.last_write
        elif not member.cursor.same_as(self.cursor):
            return False
        self.members[sub] = member
        return True

    def remove(self, sub: Subscriber) -> None:
        member = self.members.pop(sub, None)
        if member is not None:
            self._leave(member, self.cursor)

    def _leave(self, member: Member, cursor: Cursor) -> None:
        cursor.copy_to(member.cursor)
        member.last_write = max(member.last_write, self.last_write)
        member.pending = 0

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
        n = len(items)
        given_back, written = self._write(last if run is None else run, with_progress, n, before)
        metrics = self.metrics
        metrics.frames_out += (n + 1 if with_progress else n) * written
        metrics.deltas_out += n * written
        return given_back

    def deliver_progress(self, progress: Progress) -> list[Subscriber]:
        before = Cursor()
        self.cursor.copy_to(before)
        if not self.cursor.accept_progress(progress):
            return []
        given_back, written = self._write(progress, False, 1, before)
        self.metrics.frames_out += written
        return given_back

    def _write(
        self, source: FeedDelta | FeedRun | Progress, with_progress: bool, count: int,
        before: Cursor,
    ) -> tuple[list[Subscriber], int]:  # fmt: skip
        """``source`` to every member, the cursor already moved past it; the members given
        back, and how many took it. Those that took none of it leave with ``before``; one that
        took part of it leaves with the cursor after it, the rest queued on its transport."""
        troubled = self.write(self.members, source, with_progress) if self.members else []
        now = self.last_write = self.clock()
        written = len(self.members)
        given_back = []
        for sub, took_some in troubled:
            member = self.members.pop(sub)
            if took_some:
                self._leave(member, self.cursor)
                member.pending = count
                member.last_write = now
            else:
                written -= 1
                self._leave(member, before)
            given_back.append(sub)
        return given_back, written

    def _disband(self) -> list[Subscriber]:
        members = list(self.members)
        for sub in members:
            self.remove(sub)
        return members
