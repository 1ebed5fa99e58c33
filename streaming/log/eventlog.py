"""Appending events to the log: validate everything first, then append the batch once
(``liveviews.log.append``): all or nothing on a single server, partition by partition on a
store cluster."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from liveviews.app import App
from liveviews.changes.topic import VIEWS_FRONTIER, read_frontier
from liveviews.errors import StoreMismatch
from liveviews.log.append import SCRIPT, Idempotency, append_sync, calls, settle
from liveviews.log.events import Event, Offset, log_stream, partition_for
from liveviews.log.retention import Retention
from liveviews.log.writer import LogWriter
from liveviews.store.client import Client, is_cluster
from liveviews.store.upgrade import upgrade

META_KEY = "lv:{m}:meta"


def check_layout(client: Client, partitions: int, shards: int) -> None:
    """Record the log and change-topic layout on first use; refuse a different one later.

    Changing the partition count would move entities between partitions and break their order,
    so a store keeps the layout it was created with. A store of an earlier release has its keys
    renamed first (``liveviews.store.upgrade``).
    """
    upgrade(client)
    fields = ["log_partitions", "change_shards"]
    stored: Any = client.hmget(META_KEY, fields)
    if None in stored:  # written only when missing: a full store refuses any write
        client.hsetnx(META_KEY, "log_partitions", partitions)
        client.hsetnx(META_KEY, "change_shards", shards)
        stored = client.hmget(META_KEY, fields)
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


def queue_appends(
    pipe: Any,
    placed: Sequence[tuple[str, dict[bytes, bytes]]],
    retention: Retention | None,
    store_now_ms: int,
) -> None:
    """Queue the XADDs of ``placed`` on a pipeline (sync or asyncio), trimming as ``retention``
    says: the trim rides with the append, so a partition never grows past it between appends.
    ``store_now_ms`` is the store's clock (``store_time_ms``), the clock of the entry ids: a
    trim by age on this process's clock would drop events the log keeps if that clock jumped
    ahead."""
    options = retention.xadd_options(store_now_ms) if retention is not None else {}
    for stream, fields in placed:
        pipe.xadd(stream, fields, **options)


def store_time_ms(client: Any) -> int:
    """The store's clock, in milliseconds (its ``TIME``)."""
    seconds, micros = client.time()
    return int(seconds) * 1000 + int(micros) // 1000


def offsets_from(streams: Sequence[str], ids: Sequence[Any]) -> list[Offset]:
    out = []
    for stream, eid in zip(streams, ids, strict=True):
        out.append(
            Offset(int(stream.rsplit(":", 1)[1]), eid.decode() if isinstance(eid, bytes) else eid)
        )
    return out


class EventLog(LogWriter):
    """Synchronous writer of an application's events.

    A batch is appended once per idempotency key (``liveviews.log.append``): on a single
    server in one transaction, every event or none; on a store cluster each partition's events
    at once, and a ``PartialAppend`` when some partitions could not be written, which the same
    call with the same ``idempotency_key`` completes. ``ack_replicas`` replicas must confirm a
    batch before it returns (``LV_STORE_ACK_REPLICAS``).
    """

    def __init__(
        self,
        client: Client,
        app: App,
        partitions: int,
        retention: Retention | None = None,
        *,
        ack_replicas: int = 0,
    ) -> None:
        self.client = client
        self.app = app
        self.partitions = partitions
        self.retention = retention
        self.ack_replicas = ack_replicas
        self.script = client.register_script(SCRIPT)

    def append_validated(
        self, events: Sequence[Event], idempotency: Idempotency | None = None
    ) -> list[Offset]:
        if not events:
            return []
        if idempotency is None:
            idempotency = Idempotency.of([e.encode() for e in events])
        batch = calls(events, self.partitions, self.retention, idempotency,
                      single_server=not is_cluster(self.client))  # fmt: skip
        outcomes = append_sync(self.client, self.script, batch, self.ack_replicas,
                               idempotency=idempotency)  # fmt: skip
        return settle(len(events), batch, outcomes)

    def empty(self) -> bool:
        return not any(self.client.exists(log_stream(p)) for p in range(self.partitions))


def queue_heads(pipe: Any, partitions: int) -> None:
    """Queue the read of each log partition's newest entry (sync or asyncio pipeline)."""
    for p in range(partitions):
        pipe.xrevrange(log_stream(p), count=1)


def log_heads(client: Client, partitions: int) -> dict[int, str]:
    """The newest entry id of each log partition that has events, in one round trip."""
    with client.pipeline(transaction=False) as pipe:
        queue_heads(pipe, partitions)
        return heads_of(pipe.execute())


def heads_of(results: list[Any]) -> dict[int, str]:
    """What ``queue_heads`` read: each partition's newest entry id, if it has any."""
    return {p: h[0][0].decode() for p, h in enumerate(results) if h}


def views_caught_up(client: Client, partitions: int) -> bool:
    """The views' frontier is at the head of every log partition that has events."""
    frontier = read_frontier(client, VIEWS_FRONTIER)
    return all(frontier.get(p) == h for p, h in log_heads(client, partitions).items())
