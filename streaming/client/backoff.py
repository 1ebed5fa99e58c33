"""Reconnect delays with full jitter: a random delay between 0 and an exponentially growing cap,
so that many clients cut off together do not come back together. The constants are
client-js's (``backoff.js``, ``client.js``)."""

from __future__ import annotations

import random
from collections.abc import Callable

MIN_DELAY = 0.5
MAX_DELAY = 20.0


def full_jitter(
    attempt: int,
    min_delay: float = MIN_DELAY,
    max_delay: float = MAX_DELAY,
    rand: Callable[[], float] = random.random,
) -> float:
    """The delay in seconds before retry number ``attempt`` (0-based)."""
    cap = min(max_delay, min_delay * 2 ** min(attempt, 30))
    return rand() * cap


class Backoff:
    def __init__(self, min_delay: float = MIN_DELAY, max_delay: float = MAX_DELAY) -> None:
        self.min_delay = min_delay
        self.max_delay = max_delay
        self.attempts = 0

    def next(self) -> float:
        delay = full_jitter(self.attempts, self.min_delay, self.max_delay)
        self.attempts += 1
        return delay

    def reset(self) -> None:
        self.attempts = 0
