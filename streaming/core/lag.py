"""How far a pipeline's frontier is behind the log's head: in events and in time.

Log entry ids are ``<ms>-<seq>`` with ``ms`` the time the store appended the entry, so the
time lag of a partition is the age of its newest entry the frontier does not cover, measured
against that entry's neighbour at the head: ``head ms - frontier ms``. The event lag is counted
from the stream, up to a cap, so that a rebuild that is a million events behind costs a bounded
read to measure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import redis

from streaming.core.events import entry_id_tuple, log_stream

EVENT_CAP = 10_000
"""Events counted per partition at most; a lag of more reads as ``capped``."""


@dataclass(frozen=True)
class Lag:
    events: int
    """Events in the log after the frontier (at most ``EVENT_CAP`` per partition)."""
    capped: bool
    """True when some partition had more than ``EVENT_CAP``: ``events`` is a lower bound."""
    ms: int
    """How much older the frontier's newest entry is than the log's newest, at most over the
    partitions; 0 when the frontier is at the head."""


def log_heads(client: redis.Redis, partitions: int) -> dict[int, str]:
    """Each partition's newest entry id (partitions never written to are left out)."""
    with client.pipeline(transaction=False) as pipe:
        for p in range(partitions):
            pipe.xrevrange(log_stream(p), count=1)
        heads: list[Any] = pipe.execute()
    return {p: h[0][0].decode() for p, h in enumerate(heads) if h}


def lag_ms(heads: dict[int, str], frontier: dict[int, str]) -> int:
    """The time lag of ``frontier`` (partition -> entry id) against ``heads``."""
    worst = 0
    for p, head in heads.items():
        at = entry_id_tuple(frontier[p]) if p in frontier else (0, 0)
        h = entry_id_tuple(head)
        if at < h:
            worst = max(worst, h[0] - at[0] if at != (0, 0) else 0)
    return worst


def measure(
    client: redis.Redis, partitions: int, frontier: dict[int, str], cap: int = EVENT_CAP
) -> Lag:
    """The lag of ``frontier`` now: one round trip for the heads, one for the counts."""
    heads = log_heads(client, partitions)
    behind = [p for p, h in heads.items() if p not in frontier or entry_id_tuple(frontier[p]) <
              entry_id_tuple(h)]  # fmt: skip
    with client.pipeline(transaction=False) as pipe:
        for p in behind:
            start = f"({frontier[p]}" if p in frontier else "-"
            pipe.xrange(log_stream(p), start, "+", count=cap + 1)
        counts = [len(entries) for entries in pipe.execute()]
    first_ms = _oldest_unread_ms(client, behind, frontier)
    ms = lag_ms(heads, frontier)
    if first_ms is not None and any(p not in frontier for p in behind):
        ms = max(ms, max(entry_id_tuple(heads[p])[0] for p in behind) - first_ms)
    return Lag(sum(min(c, cap) for c in counts), any(c > cap for c in counts), ms)


def _oldest_unread_ms(
    client: redis.Redis, behind: list[int], frontier: dict[int, str]
) -> int | None:
    """For partitions the frontier has never reached, the time of their first entry."""
    fresh = [p for p in behind if p not in frontier]
    if not fresh:
        return None
    with client.pipeline(transaction=False) as pipe:
        for p in fresh:
            pipe.xrange(log_stream(p), "-", "+", count=1)
        firsts: list[Any] = pipe.execute()
    times = [entry_id_tuple(f[0][0].decode())[0] for f in firsts if f]
    return min(times) if times else None
