"""Where change data capture is in the database's history, kept in the store with the log.

``lv:cdc:<slot>`` is a hash: ``lsn``, the commit position of the last transaction whose events
are in the log (or the snapshot's position), and ``tables``, the tables the log holds since
the snapshot. A transaction's events and its ``lsn`` (or those of several transactions and the
last one's) are written in one MULTI, so the log holds a transaction's events if and only if
the hash says so; the slot is confirmed only after.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import redis

from liveviews.cdc.pgoutput import lsn_text, parse_lsn
from liveviews.log.eventlog import placements, queue_appends, store_time_ms
from liveviews.log.events import Event
from liveviews.log.retention import Retention


def position_key(slot: str) -> str:
    return f"lv:cdc:{slot}"


@dataclass(frozen=True)
class Position:
    lsn: int
    tables: tuple[str, ...]


class Positions(Protocol):
    """Where a capture's transactions go with its position: the store's log
    (``StorePositions``) or a Kafka log (``liveviews.cdc.kafka.KafkaPositions``)."""

    def read(self, slot: str) -> Position | None: ...

    def append_at(
        self, slot: str, events: Sequence[Event], lsn: int, tables: Sequence[str] | None = None
    ) -> None: ...

    def close(self) -> None: ...


@dataclass
class StorePositions:
    client: redis.Redis
    partitions: int
    retention: Retention | None

    def read(self, slot: str) -> Position | None:
        return read_position(self.client, slot)

    def append_at(
        self, slot: str, events: Sequence[Event], lsn: int, tables: Sequence[str] | None = None
    ) -> None:
        append_at(self.client, slot, events, lsn, self.partitions, self.retention, tables)

    def close(self) -> None:
        """The store's client is the caller's to close."""


def read_position(client: redis.Redis, slot: str) -> Position | None:
    stored: Any = client.hgetall(position_key(slot))
    if not stored:
        return None
    tables = stored.get(b"tables", b"").decode()
    return Position(
        parse_lsn(stored[b"lsn"].decode()), tuple(sorted(filter(None, tables.split(","))))
    )


def append_at(
    client: redis.Redis,
    slot: str,
    events: Sequence[Event],
    lsn: int,
    partitions: int,
    retention: Retention | None,
    tables: Sequence[str] | None = None,
) -> None:
    """Append ``events`` and record ``lsn`` (and, for a snapshot, ``tables``), all or nothing."""
    fields = {"lsn": lsn_text(lsn)}
    if tables is not None:
        fields["tables"] = ",".join(sorted(tables))
    now = store_time_ms(client) if retention is not None else 0
    with client.pipeline(transaction=True) as pipe:
        queue_appends(pipe, placements(events, partitions), retention, now)
        pipe.hset(position_key(slot), mapping=fields)  # type: ignore[arg-type]
        pipe.execute()
