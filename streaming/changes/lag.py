"""How far a pipeline's frontier is behind the log's head: in events and in time.

Log entry ids are ``<ms>-<seq>`` with ``ms`` the time the store appended the entry, so the
time lag of a partition is ``head ms - frontier ms``. The event lag is counted by the store,
up to a cap, so that a rebuild a million events behind costs a bounded read to measure. The
reads are queued on a pipeline the caller runs, so the command line (redis-py) and the
gateway's ``/metrics`` (redis.asyncio) measure alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from liveviews.log.eventlog import heads_of, log_heads, queue_heads
from liveviews.log.events import entry_id_tuple, log_stream
from liveviews.store.client import Client

__all__ = ["EVENT_CAP", "Lag", "Plan", "lag_ms", "log_heads", "measure", "measure_all"]

EVENT_CAP = 10_000
"""Events counted per partition at most; a lag of more reads as ``capped``."""

COUNT_SCRIPT = "return #redis.call('XRANGE', KEYS[1], ARGV[1], '+', 'COUNT', ARGV[2])"
"""The store counts the entries after a frontier itself: read back, a version being built far
behind the log would be up to ``EVENT_CAP`` entries per partition for the caller to parse
(0.26 s of the gateway's loop per scrape against 1.4 ms, docs/performance/metrics.md)."""


@dataclass(frozen=True)
class Lag:
    events: int
    """Events in the log after the frontier (at most ``EVENT_CAP`` per partition)."""
    capped: bool
    """True when some partition had more than ``EVENT_CAP``: ``events`` is a lower bound."""
    ms: int
    """How much older the frontier's newest entry is than the log's newest, at most over the
    partitions; 0 when the frontier is at the head."""


def lag_ms(heads: dict[int, str], frontier: dict[int, str]) -> int:
    """The time lag of ``frontier`` (partition -> entry id) against ``heads``."""
    worst = 0
    for p, head in heads.items():
        at = entry_id_tuple(frontier[p]) if p in frontier else (0, 0)
        h = entry_id_tuple(head)
        if at < h:
            worst = max(worst, h[0] - at[0] if at != (0, 0) else 0)
    return worst


@dataclass(frozen=True)
class Plan:
    """The second round trip of a measure of several frontiers (by name), once the heads are
    read: the counts of the partitions each is behind in, and the first entry of each partition
    some frontier has never reached (its age is that frontier's time lag there)."""

    heads: dict[int, str]
    frontiers: dict[str, dict[int, str]]

    @property
    def behind(self) -> dict[str, list[int]]:
        return {
            name: [p for p, h in self.heads.items()
                   if p not in f or entry_id_tuple(f[p]) < entry_id_tuple(h)]
            for name, f in self.frontiers.items()
        }  # fmt: skip

    @property
    def fresh(self) -> list[int]:
        return sorted(
            {p for name, ps in self.behind.items() for p in ps if p not in self.frontiers[name]}
        )

    def queue(self, pipe: Any) -> None:
        for name, ps in self.behind.items():
            for p in ps:
                start = f"({self.frontiers[name][p]}" if p in self.frontiers[name] else "-"
                # A cluster's pipeline has an eval() of its own, which runs the pipeline.
                pipe.execute_command("EVAL", COUNT_SCRIPT, 1, log_stream(p), start, EVENT_CAP + 1)
        for p in self.fresh:
            pipe.xrange(log_stream(p), "-", "+", count=1)

    def lags(self, results: list[Any]) -> dict[str, Lag]:
        fresh = self.fresh
        firsts = {
            p: entry_id_tuple(r[0][0].decode())[0]
            for p, r in zip(fresh, results[len(results) - len(fresh) :], strict=True)
            if r
        }
        out: dict[str, Lag] = {}
        at = 0
        for name, ps in self.behind.items():
            frontier = self.frontiers[name]
            counts = [int(r) for r in results[at : at + len(ps)]]
            at += len(ps)
            ms = lag_ms(self.heads, frontier)
            unread = [firsts[p] for p in ps if p not in frontier and p in firsts]
            if unread:
                ms = max(ms, max(entry_id_tuple(self.heads[p])[0] for p in ps) - min(unread))
            capped = any(c > EVENT_CAP for c in counts)
            out[name] = Lag(sum(min(c, EVENT_CAP) for c in counts), capped, ms)
        return out


def measure_all(
    client: Client, partitions: int, frontiers: dict[str, dict[int, str]]
) -> dict[str, Lag]:
    """The lag of each of ``frontiers`` now, in two round trips for all of them."""
    if not frontiers:
        return {}
    with client.pipeline(transaction=False) as pipe:
        queue_heads(pipe, partitions)
        plan = Plan(heads_of(pipe.execute()), frontiers)
    with client.pipeline(transaction=False) as pipe:
        plan.queue(pipe)
        return plan.lags(pipe.execute())


def measure(client: Client, partitions: int, frontier: dict[int, str]) -> Lag:
    return measure_all(client, partitions, {"": frontier})[""]
