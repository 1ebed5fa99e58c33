"""Appending events to the log: validate everything first, then write all or nothing."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import redis

from streaming.core.app import App
from streaming.core.changes import VIEWS_FRONTIER, read_frontier
from streaming.core.errors import StoreMismatch
from streaming.core.events import Event, Offset, log_stream, partition_for

META_KEY = "lv:meta"


def check_layout(client: redis.Redis, partitions: int, shards: int) -> None:
    """Record the log and change-topic layout on first use; refuse a different one later.

    Changing the partition count would move entities between partitions and break their order,
    so a store keeps the layout it was created with.
    """
    client.hsetnx(META_KEY, "log_partitions", partitions)
    client.hsetnx(META_KEY, "change_shards", shards)
    stored: Any = client.hmget(META_KEY, ["log_partitions", "change_shards"])
    have = (int(stored[0]), int(stored[1]))
    if have != (partitions, shards):
        raise StoreMismatch(
            f"the store was created with LV_LOG_PARTITIONS={have[0]} and "
            f"LV_CHANGE_SHARDS={have[1]}; "
            f"this process has {partitions} and {shards}. Set them to the store's values, "
            "or start from an empty store."
        )


def placements(events: Sequence[Event], partitions: int) -> list[tuple[str, dict[bytes, bytes]]]:
    """Where and what to write for each event, in order."""
    return [(log_stream(partition_for(e.key, partitions)), e.encode()) for e in events]


def offsets_from(streams: Sequence[str], ids: Sequence[Any]) -> list[Offset]:
    out = []
    for stream, eid in zip(streams, ids, strict=True):
        out.append(
            Offset(int(stream.rsplit(":", 1)[1]), eid.decode() if isinstance(eid, bytes) else eid)
        )
    return out


class EventLog:
    """Synchronous writer of an application's events.

    A batch is one MULTI/EXEC transaction: either every event is appended or none is.
    """

    def __init__(self, client: redis.Redis, app: App, partitions: int) -> None:
        self.client = client
        self.app = app
        self.partitions = partitions

    def append(self, raw: Any) -> Offset:
        return self.append_batch([raw])[0]

    def append_batch(self, raws: Iterable[Any]) -> list[Offset]:
        events = self.app.validate_batch(raws)
        return self.append_validated(events)

    def append_validated(self, events: Sequence[Event]) -> list[Offset]:
        if not events:
            return []
        placed = placements(events, self.partitions)
        with self.client.pipeline(transaction=True) as pipe:
            for stream, fields in placed:
                pipe.xadd(stream, fields)  # type: ignore[arg-type]
            ids = pipe.execute()
        return offsets_from([s for s, _ in placed], ids)


def log_heads(client: redis.Redis, partitions: int) -> dict[int, str]:
    """The newest entry id of each log partition that has events."""
    heads = {}
    for p in range(partitions):
        last: Any = client.xrevrange(log_stream(p), count=1)
        if last:
            heads[p] = last[0][0].decode()
    return heads


def views_caught_up(client: redis.Redis, partitions: int) -> bool:
    """The views' frontier is at the head of every log partition that has events."""
    frontier = read_frontier(client, VIEWS_FRONTIER)
    return all(frontier.get(p) == h for p, h in log_heads(client, partitions).items())
