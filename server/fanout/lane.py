"""A frontier's lane in the hub: the subscribers that follow one pipeline's frontier, the
progress owed to them, and the waits of those of them waiting for it to reach log positions."""

from __future__ import annotations

import asyncio

from liveviews.gateway.fanout.items import Progress
from liveviews.gateway.fanout.subscriber import Subscriber

Wanted = dict[str, tuple[int, int]]
"""Log positions a client waits for its view to reflect: partition -> entry id as a tuple."""

INF = float("inf")

MAX_WAITS = 32
"""Waits one subscriber keeps apart (``Hub.wait``); more are merged into the last one."""


class Lane:
    """One frontier's progress, the subscribers that follow it, and those of them waiting for
    it to reach some log positions (``Hub.wait``)."""

    __slots__ = ("subscribers", "pending", "latest", "flush_at", "flush_when", "rode", "swept",
                 "joined", "changed", "reads", "changed_watchers", "waits")  # fmt: skip

    def __init__(self) -> None:
        self.subscribers: set[Subscriber] = set()
        self.pending: Progress | None = None
        """The newest frontier read that not every subscriber owed it was sent yet."""
        self.latest: Progress | None = None
        """The newest frontier read: its deltas have all been handed out."""
        self.flush_at: asyncio.Handle | None = None
        self.flush_when = INF
        """The loop time ``flush_at`` is due (uvloop's handles do not say)."""
        self.rode: dict[tuple[str, str], float] = {}
        """When each key's subscribers were last passed a frontier. Sweeps drop entries older
        than the quiet interval (or one and a half progress intervals, if longer), except owed
        keys'; a key without an entry counts as passed none for that long."""
        self.joined: dict[tuple[str, str], float] = {}
        """When each followed key's first subscriber was attached: its snapshot carried a
        frontier, so the quiet sweeps count it as passed one then. The entry goes with the key's
        last subscriber."""
        self.swept = float("-inf")
        """When every subscriber was last passed the newest frontier (the quiet rhythm)."""
        self.changed: dict[tuple[str, str], int] = {}
        """Keys handed deltas without the frontier that covers them: owed it. Each with the
        count of frontiers read before its deltas (``reads``): only a later one covers them."""
        self.reads = 0
        """Frontiers of this lane read so far."""
        self.changed_watchers: set[Subscriber] = set()
        """The same for subscribers of a prefix."""
        self.waits: dict[Subscriber, list[Wanted]] = {}


def add_wait(waits: list[Wanted], wanted: Wanted) -> None:
    """``wanted`` among a subscriber's ``waits``, at most ``MAX_WAITS`` apart: beyond them it is
    merged into the last, whose frontier then comes when it covers both (later than the first
    needs, never sooner than a covering one)."""
    if len(waits) < MAX_WAITS:
        waits.append(wanted)
        return
    last = waits[-1]
    parts = last.keys() | wanted.keys()
    waits[-1] = {p: max(last.get(p, (0, 0)), wanted.get(p, (0, 0))) for p in parts}


def end_waits(lane: Lane, progress: Progress) -> list[Subscriber]:
    """Drop the waits of ``lane`` that ``progress`` covers; the subscribers that had one."""
    ended = []
    for sub, waits in list(lane.waits.items()):
        left = [w for w in waits if not covers(progress, w)]
        if len(left) == len(waits):
            continue
        ended.append(sub)
        if left:
            lane.waits[sub] = left
        else:
            del lane.waits[sub]
    return ended


def covers(progress: Progress, wanted: Wanted) -> bool:
    """Has ``progress`` reached every log position of ``wanted``?"""
    reached = progress.reached
    return all(p in reached and reached[p] >= at for p, at in wanted.items())
