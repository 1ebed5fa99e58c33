"""Room left in the store for the log, read from ``INFO memory`` at most once per interval.

A store at its ``maxmemory`` with ``noeviction`` refuses every write, the pipeline's too: its
views and change topic would stop. So the gateway stops taking events a little before, while
the store's used memory is above ``LV_STORE_FULL_PERCENT`` of its maxmemory, and the pipeline
keeps the rest of the room to turn the events already in the log into views. A store without
a maxmemory (0) has no such room to keep, and nothing is refused. On a store cluster the
figures are those of the fullest primary that answers: a partition on it would be refused
first.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable
from typing import Any

from redis.exceptions import ResponseError

from liveviews.gateway.errors import Unavailable
from liveviews.gateway.feed.nodes import is_cluster

log = logging.getLogger("liveviews.gateway")


def megabytes(n: int) -> str:
    return f"{n / 1_048_576:.0f} MB"


def store_full(used: int = 0, limit: int = 0) -> Unavailable:
    """503 ``store_full``, with the figures of ``INFO memory`` when there are any."""
    figures = f" ({megabytes(used)} used of its {megabytes(limit)} maxmemory)" if limit else ""
    return Unavailable(
        f"the store is full{figures}, so no event is taken until room is made: try again "
        "later. Operators: raise its maxmemory (LV_STORE_MAXMEMORY) or keep less of the log "
        "(LV_LOG_RETENTION).",
        code="store_full",
    )


class StoreMemory:
    """``await check()`` raises 503 ``store_full`` while the store is nearly full."""

    def __init__(
        self,
        client: Any,
        full_percent: int,
        interval_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.full_percent = full_percent
        self.interval_s = interval_s
        self.clock = clock
        self.used = 0
        self.limit = 0
        """The store's maxmemory in bytes at the last read; 0: none, so no guard."""
        self._read_at = -math.inf
        self._lock = asyncio.Lock()

    @property
    def full(self) -> bool:
        return bool(self.limit) and self.used * 100 >= self.limit * self.full_percent

    async def check(self) -> None:
        if self.clock() - self._read_at >= self.interval_s:
            async with self._lock:  # one read at a time; those waiting take its answer
                if self.clock() - self._read_at >= self.interval_s:
                    await self._read()
        if self.full:
            raise store_full(self.used, self.limit)

    def forget(self) -> None:
        """The store refused a write for memory: read its figures again at the next check."""
        if self.interval_s != math.inf:
            self._read_at = -math.inf

    async def _info(self) -> dict[str, Any]:
        if not is_cluster(self.client):
            found: dict[str, Any] = await self.client.info("memory")
            return found
        # Each primary on its own: one that does not answer (failing over) is left out, and
        # its partitions' appends find out for themselves.
        await self.client.initialize()
        primaries = self.client.get_primaries()
        each = await asyncio.gather(
            *(self.client.info("memory", target_nodes=p) for p in primaries),
            return_exceptions=True,
        )
        answers = [a for a in each if isinstance(a, dict)]
        if not answers:
            raise next(e for e in each if isinstance(e, BaseException))
        return max(answers, key=_fullness)

    async def _read(self) -> None:
        try:
            info = await self._info()
        except ResponseError as exc:
            # A hosted store may refuse INFO, for good: without its figures there is no guard
            # (asked once), and the store's own refusal (OOM) still answers store_full.
            log.warning("the store refused INFO memory (%s); publishing is not guarded", exc)
            self.used, self.limit, self.interval_s = 0, 0, math.inf
        else:
            self.used, self.limit = int(info["used_memory"]), int(info.get("maxmemory", 0))
        self._read_at = self.clock()


def _fullness(info: dict[str, Any]) -> float:
    limit = int(info.get("maxmemory", 0))
    return int(info["used_memory"]) / limit if limit else 0.0
