"""Appending to the log: validation first, all or nothing, ordered per entity."""

from __future__ import annotations

import time

import pytest

from demo.chirp import app
from liveviews.errors import ConfigurationError, InvalidEvent, StoreMismatch
from liveviews.log.eventlog import EventLog, check_layout
from liveviews.log.events import decode_entry, entry_id_tuple, log_stream, partition_for
from liveviews.log.retention import Retention
from liveviews.pipeline.settings import Settings

GOOD = {"type": "tweet_posted", "payload": {"user": "bob", "tweet": "bob:1", "text": "hi"}}


def total_entries(store) -> int:
    return sum(store.xlen(log_stream(p)) for p in range(4))


def test_append_returns_offsets_in_the_entity_partition(store):
    log = EventLog(store, app, 4)
    offsets = log.append_batch(
        [GOOD, {"type": "like", "payload": {"user": "amy", "tweet": "bob:1"}}]
    )
    assert [o.partition for o in offsets] == [partition_for("bob", 4)] * 2
    assert entry_id_tuple(offsets[0].id) < entry_id_tuple(offsets[1].id)
    ((eid, fields),) = store.xrange(log_stream(offsets[1].partition), min=offsets[1].id, count=1)
    event = decode_entry(offsets[1].partition, eid, fields)
    assert (event.type, event.key, event.payload) == (
        "like",
        "bob",
        {"user": "amy", "tweet": "bob:1"},
    )
    assert event.ingest_ms == entry_id_tuple(offsets[1].id)[0]


@pytest.mark.parametrize(
    "bad, code, field",
    [
        ({"type": "nope", "payload": {}}, "unknown_event_type", "type"),
        ({"type": "tweet_posted", "payload": {"user": "bob", "tweet": "bob:1"}}, "missing_field", "text"),
        ({"type": "tweet_posted", "payload": {"user": 5, "tweet": "bob:1", "text": "x"}}, "wrong_type", "user"),
        ({"type": "tweet_posted", "payload": {**GOOD["payload"], "extra": 1}}, "unexpected_field", "extra"),
        ({"type": "tweet_posted", "payload": {**GOOD["payload"], "text": "x" * 281}}, "invalid_field", "text"),
        ({"type": "tweet_posted", "payload": {**GOOD["payload"], "tweet": "amy:1"}}, "invalid_field", None),
        ({"type": "follow", "payload": {"user": "bob", "followee": "bob"}}, "invalid_field", None),
        ({"type": "profile_set", "payload": {"user": "Bob!", "name": "B"}}, "invalid_field", "user"),
        ({**GOOD, "time": "yesterday"}, "invalid_time", "time"),
        ({**GOOD, "time": -5}, "invalid_time", "time"),
        ({**GOOD, "who": "me"}, "unexpected_field", "who"),
        ({"type": "like", "payload": [1, 2]}, "wrong_type", "payload"),
        ("not an object", "wrong_type", None),
    ],
)  # fmt: skip
def test_an_invalid_event_rejects_the_whole_batch(store, bad, code, field):
    log = EventLog(store, app, 4)
    with pytest.raises(InvalidEvent) as info:
        log.append_batch([GOOD, bad])
    assert info.value.code == code
    assert info.value.index == 1 and info.value.field == field
    assert info.value.message.startswith("event 1: ")
    assert total_entries(store) == 0


def test_event_time_accepts_iso_and_milliseconds(store):
    log = EventLog(store, app, 4)
    a = log.append({**GOOD, "time": "2026-01-01T00:00:00Z"})
    b = log.append({**GOOD, "time": 1_767_225_600_000})
    times = []
    for off in (a, b):
        ((eid, f),) = store.xrange(log_stream(off.partition), min=off.id, max=off.id)
        times.append(decode_entry(off.partition, eid, f).time_ms)
    assert times == [1_767_225_600_000] * 2


def test_store_keeps_the_layout_it_was_created_with(store):
    check_layout(store, 4, 16)
    check_layout(store, 4, 16)
    with pytest.raises(StoreMismatch, match="LV_LOG_PARTITIONS=4"):
        check_layout(store, 8, 16)


def test_retention_by_count_keeps_about_the_newest_n_of_each_partition(store):
    log = EventLog(store, app, 4, Retention(entries=100))
    for _ in range(10):
        log.append_batch([GOOD] * 50)
    # Trimmed by whole nodes of 100 entries (MAXLEN ~): never fewer than asked.
    assert 100 <= store.xlen(log_stream(partition_for("bob", 4))) <= 200


def test_retention_by_age_trims_what_the_store_took_before_it(store):
    stream = log_stream(partition_for("bob", 4))
    for i in range(200):  # two whole nodes appended in 1970
        store.xadd(
            stream, {"type": "x", "key": "bob", "time": "0", "payload": "{}"}, id=f"1-{i + 1}"
        )
    EventLog(store, app, 4, Retention(age_ms=86_400_000)).append(GOOD)
    assert [entry_id_tuple(e[0].decode())[0] > 1 for e in store.xrange(stream)] == [True]


def test_a_clock_that_jumped_ahead_trims_nothing_the_log_keeps(store, monkeypatch):
    """A trim by age goes by the store's clock, the clock of the entry ids: an appender whose
    own clock jumped two days ahead (a bad NTP step, a VM resumed wrong) must not trim the
    events of the last hour, through the gateway's path (append.lua) nor CDC's (a MULTI)."""
    from liveviews.cdc.position import append_at

    real = time.time
    log = EventLog(store, app, 4, Retention(age_ms=3_600_000))
    first = log.append_batch([GOOD] * 10)
    monkeypatch.setattr(time, "time", lambda: real() + 2 * 86_400)
    later = log.append_batch([GOOD] * 10)
    append_at(store, "slot", [app.validate(GOOD)] * 10, 1, 4, Retention(age_ms=3_600_000))
    logged = {e[0].decode() for p in range(4) for e in store.xrange(log_stream(p))}
    assert {o.id for o in first + later} <= logged and len(logged) == 30


def test_no_retention_keeps_everything(store):
    log = EventLog(store, app, 4)
    for _ in range(5):
        log.append_batch([GOOD] * 50)
    assert total_entries(store) == 250


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (None, None),
        ("", None),
        ("off", None),
        ("1000000", Retention(entries=1_000_000)),
        ("30d", Retention(age_ms=30 * 86_400_000)),
        ("12h", Retention(age_ms=12 * 3_600_000)),
        ("90m", Retention(age_ms=90 * 60_000)),
        ("3600s", Retention(age_ms=3_600_000)),
    ],
)
def test_lv_log_retention_is_off_a_count_or_an_age(raw, expected):
    assert Retention.parse(raw) == expected
    env = {"LV_DATA_DIR": "/tmp/lv-unused", **({"LV_LOG_RETENTION": raw} if raw else {})}
    assert Settings.from_env(env).log_retention == expected


@pytest.mark.parametrize("raw", ["0", "-5", "1w", "30 days", "d", "1.5h", "²", "١٠٠"])
def test_a_malformed_lv_log_retention_is_refused_with_its_forms(raw):
    with pytest.raises(ConfigurationError, match="LV_LOG_RETENTION must be off, a number"):
        Retention.parse(raw)
