"""The log entry format: the one place that writes and reads events in the log.

An event lives in one of P Redis Streams (``lv:log:<p>``), chosen by its partition key, so all
events of one entity are totally ordered. Its position there, (partition, entry id), is the
offset a writer gets back. The entry holds four fields:

``type``     the event type name
``key``      the partition key (for Chirp: the entity the event is about)
``time``     event time given by the producer, milliseconds since the epoch
``payload``  the validated payload, JSON (orjson)

The ingestion time is not stored twice: it is the millisecond part of the entry id, assigned
by the store when the event was appended.
"""

from __future__ import annotations

import re
import time as _time
import zlib
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson

from liveviews.errors import InvalidEvent

LOG_PREFIX = "lv:log:"
FIELD_TYPE = b"type"
FIELD_KEY = b"key"
FIELD_TIME = b"time"
FIELD_PAYLOAD = b"payload"
FIELD_TX = b"tx"
"""The source transaction an event belongs to (change data capture): its commit position."""
FIELD_TX_EVENTS = b"tx_events"
"""How many events that transaction appended, over every partition: a reader that holds fewer
of them holds part of the transaction (``liveviews.pipeline.source`` never ends a batch there)."""
MAX_EVENT_TIME_MS = 253402300799999  # 9999-12-31T23:59:59.999Z


def log_stream(partition: int) -> str:
    return f"{LOG_PREFIX}{partition}"


def partition_for(key: str, partitions: int) -> int:
    """Stable across processes and versions (unlike ``hash``): CRC-32 of the UTF-8 key."""
    return zlib.crc32(key.encode()) % partitions


POSITION_RE = re.compile(r"[0-9]{1,20}(?:-[0-9]{1,20})?")
"""A position within a log partition, in either log's own form: a Redis Streams entry id
``<ms>-<seq>``, or on Apache Kafka ``<n>``, the event's Kafka offset plus one (Kafka's own
convention for a consumer's position: the next offset to read). Either way ``0`` / ``0-0`` is
before every event. One deployment's log has one form; both compare as pairs of numbers (``n``
as ``(n, 0)``), never as strings."""


def entry_id_tuple(entry_id: str) -> tuple[int, int]:
    """A position (``POSITION_RE``) as a comparable pair."""
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


@dataclass(frozen=True)
class Offset:
    """A position in the log: the consistency token a writer gets back."""

    partition: int
    id: str

    def __str__(self) -> str:
        return f"{self.partition}:{self.id}"

    def to_dict(self) -> dict[str, Any]:
        return {"partition": self.partition, "id": self.id}

    @classmethod
    def parse(cls, token: str) -> Offset:
        part, sep, entry = token.partition(":")
        if not sep or not part.isascii() or not part.isdigit() or not POSITION_RE.fullmatch(entry):
            raise InvalidEvent(
                f"offset {token!r} is not of the form '<partition>:<ms>-<seq>' (or "
                "'<partition>:<n>' on a Kafka log), as publish answers it.",
                code="invalid_offset",
            )
        return cls(int(part), entry)


@dataclass(frozen=True)
class Event:
    """A validated event, as the log holds it."""

    type: str
    key: str
    payload: dict[str, Any]
    time_ms: int
    tx: Transaction | None = None

    def encode(self) -> dict[bytes, bytes]:
        fields = {
            FIELD_TYPE: self.type.encode(),
            FIELD_KEY: self.key.encode(),
            FIELD_TIME: str(self.time_ms).encode(),
            FIELD_PAYLOAD: orjson.dumps(self.payload, option=orjson.OPT_SORT_KEYS),
        }
        if self.tx is not None:
            fields[FIELD_TX] = self.tx.id.encode()
            fields[FIELD_TX_EVENTS] = str(self.tx.events).encode()
        return fields


@dataclass(frozen=True)
class Transaction:
    """The source transaction an event came from, when it came from a database's changes: all
    its events are appended at once, and become visible in the views together."""

    id: str
    """Unique per transaction in the log, e.g. a PostgreSQL commit LSN (``0/16B3748``)."""
    events: int
    """How many events the transaction appended to the log, over all partitions."""


@dataclass(frozen=True)
class LoggedEvent:
    """An event read back from the log, with its offset and ingestion time."""

    partition: int
    id: str
    type: str
    key: str
    payload_json: bytes
    time_ms: int
    logged_ms: int | None = None
    """When the log took the event, where its position does not say (a Kafka record's
    timestamp); a Redis Streams entry id holds it as its ``<ms>``."""

    @property
    def ingest_ms(self) -> int:
        return entry_id_tuple(self.id)[0] if self.logged_ms is None else self.logged_ms

    @property
    def payload(self) -> dict[str, Any]:
        return orjson.loads(self.payload_json)  # type: ignore[no-any-return]

    @property
    def offset(self) -> Offset:
        return Offset(self.partition, self.id)


def decode_entry(partition: int, entry_id: bytes | str, fields: dict[bytes, bytes]) -> LoggedEvent:
    eid = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
    return LoggedEvent(
        partition=partition,
        id=eid,
        type=fields[FIELD_TYPE].decode(),
        key=fields[FIELD_KEY].decode(),
        payload_json=fields[FIELD_PAYLOAD],
        time_ms=int(fields[FIELD_TIME]),
    )


@dataclass(frozen=True)
class TimeWindow:
    """How far an event time may lie from the clock of the process that appends it.

    A producer's clock or its input can be wrong, and an event time far in the future would
    outrank every later event (a tweet pinned to the top of every timeline, every later event
    of its partition counted late): a writer facing clients refuses such times.
    """

    max_ahead_ms: int
    max_age_ms: int

    def check(self, ms: int, now_ms: int) -> None:
        if now_ms - self.max_age_ms <= ms <= now_ms + self.max_ahead_ms:
            return
        raise InvalidEvent(
            f"time {iso(ms)} is outside the accepted window: at most "
            f"{span(self.max_ahead_ms)} after the server's clock and {span(self.max_age_ms)} "
            f"before it (it is {iso(now_ms)}). Send the time the event happened, or omit it.",
            code="time_out_of_range",
            field="time",
        )


def span(ms: int) -> str:
    """A duration in the largest whole unit that fits: ``1 day``, ``3650 days``, ``90 s``."""
    for unit_ms, unit in ((86_400_000, "day"), (3_600_000, "hour"), (60_000, "minute")):
        if ms >= unit_ms and ms % unit_ms == 0:
            n = ms // unit_ms
            return f"{n} {unit}{'s' if n != 1 else ''}"
    return f"{ms / 1000:g} s"


def now_ms() -> int:
    return int(_time.time() * 1000)


def parse_event_time(value: Any, window: TimeWindow | None = None, now: int | None = None) -> int:
    """Milliseconds since the epoch from an int (ms), an ISO-8601 string or a datetime.

    With a ``window``, a time outside it around ``now`` (the clock by default) is refused;
    without one, any time from 1970 to the year 9999 is taken.
    """
    if value is None:
        return now_ms() if now is None else now
    if isinstance(value, datetime):
        dt = value if value.tzinfo else value.replace(tzinfo=UTC)
        ms = int(dt.timestamp() * 1000)
    elif isinstance(value, bool):
        ms = -1
    elif isinstance(value, int):
        ms = value
    elif isinstance(value, str):
        try:
            dt = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise InvalidEvent(
                f"time {value!r} is not an ISO-8601 timestamp such as 2026-01-31T12:00:00Z.",
                code="invalid_time",
                field="time",
            ) from None
        dt = dt if dt.tzinfo else dt.replace(tzinfo=UTC)
        ms = int(dt.timestamp() * 1000)
    else:
        ms = -1
    if not 0 <= ms <= MAX_EVENT_TIME_MS:
        raise InvalidEvent(
            "time must be milliseconds since 1970 or an ISO-8601 timestamp before year 10000.",
            code="invalid_time",
            field="time",
        )
    if window is not None:
        window.check(ms, now_ms() if now is None else now)
    return ms


def iso(ms: int) -> str:
    return (
        datetime.fromtimestamp(ms / 1000, UTC)
        .isoformat(timespec="milliseconds")
        .replace("+00:00", "Z")
    )
