"""The log entry format and offsets, pinned: other processes and languages read them."""

from __future__ import annotations

import pytest

from liveviews.errors import InvalidEvent
from liveviews.log.events import (
    MAX_EVENT_TIME_MS,
    Event,
    Offset,
    TimeWindow,
    decode_entry,
    entry_id_tuple,
    iso,
    parse_event_time,
    partition_for,
)


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
    assert Offset.parse("3:17") == Offset(3, "17")  # a Kafka log's offset
    assert entry_id_tuple("16-9") < entry_id_tuple("17") < entry_id_tuple("17-1")
    for bad in ("3", "x:1-0", "3:abc", "", "3:-1", "3:1-", "-1:1-0", "3:1-2-3", "٣:1-0"):
        with pytest.raises(InvalidEvent):
            Offset.parse(bad)


def test_iso_times():
    assert iso(0) == "1970-01-01T00:00:00.000Z"
    assert parse_event_time("2026-01-01T00:00:00.500+00:00") == 1_767_225_600_500


def test_a_time_window_bounds_event_times_around_now():
    now = 1_767_225_600_000  # 2026-01-01T00:00:00Z
    window = TimeWindow(max_ahead_ms=86_400_000, max_age_ms=3650 * 86_400_000)
    assert parse_event_time(now + 86_400_000, window, now) == now + 86_400_000
    assert parse_event_time("2016-01-04T00:00:00Z", window, now) == 1_451_865_600_000
    assert parse_event_time(None, window, now) == now
    for far in (now + 86_400_001, "9999-12-31T23:59:59Z", "2016-01-03T23:59:59Z"):
        with pytest.raises(InvalidEvent) as info:
            parse_event_time(far, window, now)
        assert (info.value.code, info.value.field) == ("time_out_of_range", "time")
        assert "at most 1 day after the server's clock and 3650 days before it" in (
            info.value.message
        )
        assert "2026-01-01T00:00:00.000Z" in info.value.message


def test_without_a_window_any_time_up_to_the_year_9999_is_taken():
    """A replay or an import of old events (EventLog, the demo's seed) keeps working."""
    from demo.chirp import app

    raw = {"type": "profile_set", "payload": {"user": "amy", "name": "A"}}
    assert app.validate({**raw, "time": "9999-12-31T23:59:59Z"}).time_ms == MAX_EVENT_TIME_MS - 999
    assert app.validate({**raw, "time": 0}).time_ms == 0
    window = TimeWindow(max_ahead_ms=0, max_age_ms=1000)
    with pytest.raises(InvalidEvent) as info:
        app.validate_batch([raw, {**raw, "time": 0}], window)
    assert (info.value.code, info.value.index) == ("time_out_of_range", 1)
    # Without a time an event takes the batch's "now", which its window always accepts.
    assert app.validate_batch([raw], window)[0].time_ms > 0
