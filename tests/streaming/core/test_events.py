"""The log entry format and offsets, pinned: other processes and languages read them."""

from __future__ import annotations

import pytest

from streaming.core.errors import InvalidEvent
from streaming.core.events import Event, Offset, decode_entry, iso, parse_event_time, partition_for


def test_partitioning_is_stable_across_processes():
    # CRC-32, so these never change with Python's hash seed or version.
    assert [partition_for(k, 4) for k in ("alice", "bob", "carol", "dave")] == [3, 0, 3, 0]


def test_entry_round_trip():
    event = Event("like", "bob", {"user": "amy", "tweet": "bob:1"}, 1_767_225_600_000)
    fields = event.encode()
    assert fields == {
        b"type": b"like",
        b"key": b"bob",
        b"time": b"1767225600000",
        b"payload": b'{"tweet":"bob:1","user":"amy"}',
    }
    back = decode_entry(2, b"1767225600123-4", fields)
    assert back.payload == event.payload and back.time_ms == event.time_ms
    assert back.ingest_ms == 1767225600123
    assert str(back.offset) == "2:1767225600123-4"


def test_offset_tokens():
    assert Offset.parse("3:17-2") == Offset(3, "17-2")
    for bad in ("3", "x:1-0", "3:abc", ""):
        with pytest.raises(InvalidEvent):
            Offset.parse(bad)


def test_iso_times():
    assert iso(0) == "1970-01-01T00:00:00.000Z"
    assert parse_event_time("2026-01-01T00:00:00.500+00:00") == 1_767_225_600_500
