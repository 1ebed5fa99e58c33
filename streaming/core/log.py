"""Appending events to the log: validate everything first, then append the batch once
(``streaming.core.append``): all or nothing on a single server, partition by partition on a
store cluster."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from streaming.core.app import App
from streaming.core.append import SCRIPT, Idempotency, append_sync, calls, settle
from streaming.core.changes import VIEWS_FRONTIER, read_frontier
from streaming.core.errors import ConfigurationError, StoreMismatch
from streaming.core.events import Event, Offset, log_stream, now_ms, partition_for
from streaming.core.storeclient import Client, is_cluster
from streaming.core.upgrade import upgrade

META_KEY = "lv:{m}:meta"
AGE_RE = re.compile(r"([0-9]+)([smhd])")
AGE_UNITS_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


@dataclass(frozen=True)
class Retention:
    """``LV_LOG_RETENTION``: how much of each log partition an append keeps, if not all.

    Either the newest ``entries`` of each partition, or the events appended in the last
    ``age_ms`` (by their entry id, the time the store took them, not their event time). The
    store trims whole nodes of a stream (``MAXLEN ~`` / ``MINID ~``), so a partition keeps a
    little more than asked, never less. Views are computed from the log: a view rebuilt from a
    trimmed log (a new pipeline, a removed checkpoint) sees only the events that remain.
    """

    entries: int | None = None
    age_ms: int | None = None

    @classmethod
    def parse(cls, raw: str | None) -> Retention | None:
        value = (raw or "").strip().lower()
        if value in ("", "off"):
            return None
        if value.isascii() and value.isdigit() and int(value) > 0:  # not "²", which int() refuses
            return cls(entries=int(value))
        age = AGE_RE.fullmatch(value)
        if age and int(age[1]) > 0:
            return cls(age_ms=int(age[1]) * AGE_UNITS_MS[age[2]])
        raise ConfigurationError(
            f"LV_LOG_RETENTION must be off, a number of events to keep per log partition "
            f"(1000000), or an age to keep them for (30d, 12h, 90m, 3600s), not {raw!r}."
        )

    def xadd_options(self, now: int) -> dict[str, Any]:
        if self.entries is not None:
            return {"maxlen": self.entries, "approximate": True}
        assert self.age_ms is not None
        return {"minid": str(max(0, now - self.age_ms)), "approximate": True}


def check_layout(client: Client, partitions: int, shards: int) -> None:
    """Record the log and change-topic layout on first use; refuse a different one later.

    Changing the partition count would move entities between partitions and break their order,
    so a store keeps the layout it was created with. A store of an earlier release has its keys
    renamed first (``streaming.core.upgrade``).
    """
    upgrade(client)
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


def queue_appends(
    pipe: Any, placed: Sequence[tuple[str, dict[bytes, bytes]]], retention: Retention | None
) -> None:
    """Queue the XADDs of ``placed`` on a pipeline (sync or asyncio), trimming as ``retention``
    says: the trim rides with the append, so a partition never grows past it between appends."""
    options = retention.xadd_options(now_ms()) if retention is not None else {}
    for stream, fields in placed:
        pipe.xadd(stream, fields, **options)


def offsets_from(streams: Sequence[str], ids: Sequence[Any]) -> list[Offset]:
    out = []
    for stream, eid in zip(streams, ids, strict=True):
        out.append(
            Offset(int(stream.rsplit(":", 1)[1]), eid.decode() if isinstance(eid, bytes) else eid)
        )
    return out


class EventLog:
    """Synchronous writer of an application's events.

    A batch is appended once per idempotency key (``streaming.core.append``): on a single
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

    def append(self, raw: Any, idempotency_key: str | None = None) -> Offset:
        return self.append_batch([raw], idempotency_key)[0]

    def append_batch(self, raws: Iterable[Any], idempotency_key: str | None = None) -> list[Offset]:
        """Validate and append ``raws``. Called again with the same ``idempotency_key`` and
        events, it returns the same offsets and appends nothing twice (for 24 hours); without
        a key, one is made for this call, which covers its own retries through a failover."""
        raws = list(raws)
        events = self.app.validate_batch(raws)
        return self.append_validated(events, Idempotency.of(raws, idempotency_key))

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
