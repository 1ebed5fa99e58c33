"""A publish rate per subject: one token bucket each, in a map of bounded size.

A subject's bucket holds up to ``burst`` events and refills at ``rate`` events per second; a
batch takes as many tokens as it has events, all or none. A libraries' limiter (pyrate-limiter,
limits) keeps every request of its window per key, or a timer thread to clear its keys; a
bucket is two numbers, and the map forgets the least recently active subjects first.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable

MAX_SUBJECTS = 100_000
"""Buckets kept at most (about 100 bytes each). Past it the least recently active subject's
bucket is dropped: most often a full one, which is the same as none."""


class PublishRate:
    """``take(subject, n)``: 0 if ``subject`` may publish ``n`` events now, else the seconds
    until it may (the bucket is then left as it was)."""

    def __init__(
        self,
        rate: float,
        burst: int,
        max_subjects: int = MAX_SUBJECTS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.rate = rate
        self.burst = burst
        self.max_subjects = max_subjects
        self.clock = clock
        # subject -> (tokens, when they were counted); oldest update first.
        self.buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()

    def take(self, subject: str, n: int) -> float:
        if not self.rate:
            return 0.0
        now = self.clock()
        tokens, then = self.buckets.get(subject, (float(self.burst), now))
        tokens = min(float(self.burst), tokens + (now - then) * self.rate)
        if tokens < n:
            return (n - tokens) / self.rate
        self.buckets[subject] = (tokens - n, now)
        self.buckets.move_to_end(subject)
        while len(self.buckets) > self.max_subjects:
            self.buckets.popitem(last=False)
        return 0.0


def retry_after(seconds: float) -> int:
    """Whole seconds for a ``Retry-After`` header: rounded up, at least 1."""
    return max(1, math.ceil(seconds))
