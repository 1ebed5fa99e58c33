"""The log entry format on Apache Kafka: the one place that writes and reads an event as a
Kafka record (``liveviews.log.events`` is the same for Redis Streams, and names the fields).

A record's key is the event's partition key and its value the payload's JSON, as Redis Streams
entries hold them; the other fields of the entry (``type``, ``time``, and a database
transaction's ``tx`` and ``tx_events``) are headers of the same names. The log topic stamps
each record with the broker's clock (``message.timestamp.type=LogAppendTime``): that is the
event's ingestion time, as the ``<ms>`` of an entry id is on Redis Streams. A batch appended
under an idempotency key carries it in the header ``idempotency_key``, so that an append whose
outcome was lost can be found in the log (``liveviews.log.kafka.appended``).

The record's partition is chosen by ``partition_for``, as on Redis Streams, not by Kafka's own
partitioner: an entity's partition is the same in either log.
"""

from __future__ import annotations

from typing import Any

from liveviews.log.events import (
    FIELD_KEY,
    FIELD_PAYLOAD,
    FIELD_TIME,
    FIELD_TYPE,
    Event,
    LoggedEvent,
    Offset,
)

HEADER_TYPE, HEADER_TIME = FIELD_TYPE.decode(), FIELD_TIME.decode()
HEADER_IDEMPOTENCY = "idempotency_key"
Headers = list[tuple[str, str | bytes | None]]


def position(kafka_offset: int) -> str:
    """The position of the record at ``kafka_offset``: the offset after it (PROTOCOL.md §4)."""
    return str(kafka_offset + 1)


def kafka_offset(position_id: str) -> int:
    """The Kafka offset of the record at a position ``position`` made."""
    return int(position_id) - 1


def record(event: Event, idempotency_key: str | None = None) -> tuple[bytes, bytes, Headers]:
    """The key, value and headers of ``event``'s record."""
    fields = event.encode()
    headers: Headers = [(name.decode(), value) for name, value in fields.items()
               if name not in (FIELD_KEY, FIELD_PAYLOAD)]  # fmt: skip
    if idempotency_key is not None:
        headers.append((HEADER_IDEMPOTENCY, idempotency_key.encode()))
    return fields[FIELD_KEY], fields[FIELD_PAYLOAD], headers


def header(headers: Any, name: str) -> bytes | None:
    """The value of the header ``name`` of a record's ``headers`` (a list of pairs, or None)."""
    for key, value in headers or ():
        if key == name:
            return value if isinstance(value, bytes) else None
    return None


def entry_fields(
    type_: bytes | None, key: bytes | None, time: bytes | None, payload: bytes | None
) -> dict[bytes, bytes]:
    """A record's ``type`` and ``time`` headers, key and value as the fields of an entry of the
    store's log (what ``check_entry`` and dead letters read); those it lacks left out."""
    if type_ is not None and key is not None and time is not None and payload is not None:
        return {FIELD_TYPE: type_, FIELD_KEY: key, FIELD_TIME: time, FIELD_PAYLOAD: payload}
    found = {FIELD_TYPE: type_, FIELD_KEY: key, FIELD_TIME: time, FIELD_PAYLOAD: payload}
    return {name: v for name, v in found.items() if v is not None}


def decode_record(
    partition: int,
    offset: int,
    key: bytes,
    value: bytes,
    headers: Any,
    timestamp_ms: int,
) -> LoggedEvent:
    """The event a record holds, at its position (``Offset(partition, position(offset))``)."""
    kind, time = header(headers, HEADER_TYPE), header(headers, HEADER_TIME)
    if kind is None or time is None:
        raise ValueError(f"the record at {partition}:{offset} is not an event of the log")
    return LoggedEvent(partition=partition, id=position(offset), type=kind.decode(),
                       key=key.decode(), payload_json=value, time_ms=int(time),
                       logged_ms=timestamp_ms)  # fmt: skip


def offset_of(partition: int, kafka_offset: int) -> Offset:
    return Offset(partition, position(kafka_offset))
