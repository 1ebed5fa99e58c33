"""The JVM log source (``io.liveviews.spark.LogSource``) against the real store and Spark: what
its micro-batches read, where a checkpoint takes it up again (its own or the Python source's),
and what it reads in Real-Time Mode."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from demo.chirp import app
from demo.chirp.generate import Activity
from liveviews.changes.cuts import CUT_SCRIPT, CUTS_STREAM, cut_args, cut_keys, cut_of
from liveviews.log import deadletters
from liveviews.log.eventlog import EventLog
from liveviews.log.events import Offset, entry_id_tuple
from liveviews.pipeline.source import SOURCE_NAME
from tests.support.transactions import append_transactions

PARTITIONS = 4
JVM_SOURCE = "io.liveviews.spark.LogSource"
Entry = tuple[int, str]


@pytest.fixture()
def url(settings: Any) -> str:
    assert settings.log_partitions == PARTITIONS
    return str(settings.redis_url)


def _read(
    spark: Any,
    url: str,
    source: str = JVM_SOURCE,
    max_events: int = 100_000,
    readers: int = 1,
    version: str = "",
) -> Any:
    return (
        spark.readStream.format(source)
        .option("url", url)
        .option("partitions", str(PARTITIONS))
        .option("maxEventsPerBatch", str(max_events))
        .option("readers", str(readers))
        .option("version", version)
        .load()
    )


def _drain(frame: Any, checkpoint: Path) -> list[list[Any]]:
    """The rows of each batch of an ``availableNow`` run from ``checkpoint``."""
    batches: list[list[Any]] = []
    query = (
        frame.writeStream.foreachBatch(lambda df, _: batches.append(df.collect()))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    try:
        assert query.awaitTermination(60), "the availableNow run did not end within 60 s"
        assert query.exception() is None
    finally:
        query.stop()
    return [rows for rows in batches if rows]


def _entries(batches: list[list[Any]]) -> list[Entry]:
    return [(row.partition, row.offset) for rows in batches for row in rows]


def _ids(offsets: list[Offset]) -> list[Entry]:
    return sorted((o.partition, o.id) for o in offsets)


def _offsets(checkpoint: Path) -> list[str]:
    """The source offset of each batch in a checkpoint's offset log, as written."""
    logs = sorted((checkpoint / "offsets").glob("[0-9]*"), key=lambda f: int(f.name))
    return [f.read_text().splitlines()[-1] for f in logs]


def _append(store: Any, n: int, seed: int) -> list[Offset]:
    return EventLog(store, app, PARTITIONS).append_batch(Activity(users=30, seed=seed).take(n))


def test_a_micro_batch_run_reads_each_event_once_and_a_second_run_only_the_new_ones(
    spark, store, url, tmp_path
):
    first = _append(store, 100, seed=4)
    rows = [row for rows in _drain(_read(spark, url), tmp_path / "cp") for row in rows]
    assert sorted((r.partition, r.offset) for r in rows) == _ids(first)
    for row in rows:  # every column as the log holds it
        [(entry_id, fields)] = store.xrange(f"lv:log:{row.partition}", row.offset, row.offset)
        assert entry_id.decode() == row.offset
        assert row.type == fields[b"type"].decode()
        assert row.key == fields[b"key"].decode()
        assert row.payload == fields[b"payload"].decode()
        assert row.event_time_ms == int(fields[b"time"])
        assert row.ingest_time_ms == entry_id_tuple(row.offset)[0]

    second = _append(store, 50, seed=5)
    assert sorted(_entries(_drain(_read(spark, url), tmp_path / "cp"))) == _ids(second)


def test_max_events_per_batch_splits_a_backlog(spark, store, url, tmp_path):
    offsets = _append(store, 100, seed=6)
    batches = _drain(_read(spark, url, max_events=20), tmp_path / "cp")
    assert len(batches) >= 5
    assert all(len(rows) <= 20 for rows in batches)
    got = _entries(batches)
    assert len(got) == len(set(got)) and sorted(got) == _ids(offsets)


def test_a_batch_never_ends_inside_a_source_transaction(spark, store, url, tmp_path):
    # 90 events: more than the cap of 40 allows, in 4 partitions of 10.
    sizes = [3, 0, 17, 1, 0, 0, 25, 8, 90, 2, 0, 13, 40, 0, 5]
    tx_of = append_transactions(store, sizes, PARTITIONS)
    batches = _drain(_read(spark, url, max_events=40), tmp_path / "cp")
    for i, rows in enumerate(batches):
        counts: dict[str, int] = {}
        for row in rows:
            tx = tx_of.get((row.partition, row.offset))
            if tx is not None:
                counts[tx] = counts.get(tx, 0) + 1
        for tx, n in counts.items():
            assert n == sizes[int(tx[2:], 16)], f"batch {i} holds {n} events of {tx}"
        # Over the cap only to hold a transaction larger than a partition's share of it.
        assert len(rows) <= 40 or max(counts.values()) > 40 // PARTITIONS
    got = _entries(batches)
    assert len(got) == len(set(got)) == sum(max(n, 1) for n in sizes)
    assert len(batches) >= 6


def test_entries_that_are_not_events_are_read_past(spark, store, url, tmp_path):
    before = _append(store, 10, seed=7)
    store.xadd("lv:log:1", {"type": "t", "key": "k", "payload": "{}"})  # no time
    store.xadd("lv:log:2", {"type": "t", "key": "k", "time": "soon", "payload": "{}"})
    after = _append(store, 10, seed=8)
    last = store.xadd("lv:log:3", {"type": "t"}).decode()  # the newest entry of its partition
    got = _entries(_drain(_read(spark, url), tmp_path / "cp"))
    assert sorted(got) == _ids(before + after)
    assert json.loads(_offsets(tmp_path / "cp")[-1])["3"] == last  # read past, not waited at
    assert _entries(_drain(_read(spark, url), tmp_path / "cp")) == []
    assert not store.exists(deadletters.ORDER_STREAM)  # read for no pipeline: nothing set aside


def _letters(store: Any, version: str) -> dict[str, deadletters.DeadLetter]:
    return {
        k.decode(): deadletters.DeadLetter.from_json(v)
        for k, v in store.hgetall(deadletters.key_of(version)).items()
    }


def test_entries_that_are_not_events_are_set_aside_for_the_pipeline_version(
    spark, store, url, tmp_path
):
    before = _append(store, 10, seed=7)
    no_time = store.xadd("lv:log:1", {"type": "t", "key": "k", "payload": "{}"}).decode()
    soon = store.xadd("lv:log:2", {"type": "t", "key": "k", "time": "soon", "payload": "{}"})
    late = store.xadd("lv:log:0", {"type": "t", "key": "k", "time": "9" * 16, "payload": "{}"})
    after = _append(store, 10, seed=8)
    got = _entries(_drain(_read(spark, url, version="profiles@v2"), tmp_path / "cp"))
    assert sorted(got) == _ids(before + after)
    letters = _letters(store, "profiles@v2")
    assert letters.keys() == {f"1:{no_time}", f"2:{soon.decode()}", f"0:{late.decode()}"}
    first = letters[f"1:{no_time}"]
    assert (first.pipeline, first.offset, first.stage) == ("profiles@v2", f"1:{no_time}", "decode")
    assert first.error == "cannot decode the entry: the entry has no time field."
    assert first.event == {"type": "t", "key": "k", "payload": "{}"}
    assert first.batch is None and first.replayed_as is None and first.recorded_ms > 0
    assert letters[f"2:{soon.decode()}"].error == (
        "cannot decode the entry: time 'soon' is not milliseconds since 1970."
    )
    assert (
        letters[f"0:{late.decode()}"].error == "cannot decode the entry: time is after year 9999."
    )
    assert deadletters.counts(store, ["profiles@v2"]) == {"profiles@v2": 3}

    # The same entries read again (a batch replayed from a fresh checkpoint): set aside once.
    assert sorted(_entries(_drain(_read(spark, url, version="profiles@v2"), tmp_path / "cp2"))) == (
        _ids(before + after)
    )
    assert _letters(store, "profiles@v2") == letters
    assert store.xlen(deadletters.ORDER_STREAM) == 3


def test_a_checkpoint_moves_between_the_python_and_the_jvm_source(spark, store, url, tmp_path):
    checkpoint = tmp_path / "cp"
    first = _append(store, 60, seed=10)
    # (The Python source reads one batch per availableNow run: no cap on it here.)
    python = _entries(_drain(_read(spark, url, SOURCE_NAME), checkpoint))
    assert sorted(python) == _ids(first)

    second = _append(store, 40, seed=11)
    jvm = _entries(_drain(_read(spark, url, max_events=40), checkpoint))
    assert sorted(jvm) == _ids(second)  # no gap, no duplicate

    third = _append(store, 20, seed=12)
    back = _entries(_drain(_read(spark, url, SOURCE_NAME), checkpoint))
    assert sorted(back) == _ids(third)
    # Both write the offsets as Python's json.dumps does: Spark compares offsets by their JSON.
    for text in _offsets(checkpoint):
        assert text == json.dumps(json.loads(text))
        assert list(json.loads(text)) == [str(p) for p in range(PARTITIONS)]


def _store_writer(url: str, key: str) -> Callable[..., Any]:
    """A ``foreach`` writer that pushes each row's entry to the list ``key`` of the store, with
    how long after its append the JVM projected it and this writer got it. Defined here so that
    it is pickled by value."""

    class StoreWriter:
        def open(self, partition_id: int, epoch_id: int) -> bool:
            import redis

            self.client = redis.Redis.from_url(url)
            return True

        def process(self, row: Any) -> None:
            now = int(time.time() * 1000)
            read, written = row.read_ms - row.ingest_time_ms, now - row.ingest_time_ms
            self.client.rpush(key, json.dumps([row.partition, row.offset, read, written]))

        def close(self, error: BaseException | None) -> None:
            self.client.close()

    return StoreWriter  # type: ignore[return-value]


def _arrived(store: Any, key: str, want: set[Entry], seconds: float = 30) -> list[Any]:
    deadline = time.monotonic() + seconds
    while True:
        pushed = [json.loads(item) for item in store.lrange(key, 0, -1)]
        if want <= {(p, o) for p, o, *_ in pushed} or time.monotonic() > deadline:
            return pushed
        time.sleep(0.2)


def _committed(query: Any, want: list[Offset], seconds: float = 30) -> None:
    """Waits until a batch holding every one of ``want`` has ended (its offsets recorded)."""
    newest: dict[str, str] = {}
    for o in want:
        if entry_id_tuple(o.id) > entry_id_tuple(newest.get(str(o.partition), "0-0")):
            newest[str(o.partition)] = o.id
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        progress = query.lastProgress
        if progress and progress["sources"]:
            end = json.loads(progress["sources"][0]["endOffset"])
            if all(entry_id_tuple(end[p]) >= entry_id_tuple(i) for p, i in newest.items()):
                return
        time.sleep(0.2)
    raise AssertionError(f"no batch ended at {newest} within {seconds} s: {query.lastProgress}")


def _real_time(
    spark: Any, url: str, checkpoint: Path, key: str, readers: int, version: str = ""
) -> Any:
    """A stateless projection of the source in Real-Time Mode into a Python ``foreach``; the
    projection notes when the JVM saw each row (``reflect`` is evaluated per row)."""
    return (
        _read(spark, url, readers=readers, version=version)
        .selectExpr(
            "partition",
            "offset",
            "ingest_time_ms",
            "cast(reflect('java.lang.System', 'currentTimeMillis') as bigint) as read_ms",
        )  # fmt: skip
        .writeStream.outputMode("update")
        .foreach(_store_writer(url, key)())
        .option("checkpointLocation", str(checkpoint))
        .trigger(realTime="5 seconds")
        .start()
    )


def test_real_time_mode_reads_each_event_once_across_a_restart(spark, store, url, tmp_path):
    key, checkpoint = "test:rtm:rows", tmp_path / "cp"
    backlog = _append(store, 30, seed=13)
    query = _real_time(spark, url, checkpoint, key, readers=1, version="rtm@v1")
    try:
        _arrived(store, key, set(_ids(backlog)))
        live: list[Offset] = []  # appended while a reader follows the log
        for seed in range(5):
            live += _append(store, 4, seed=100 + seed)
            if seed == 2:  # not an event: read past, and set aside for the pipeline version
                bad = store.xadd("lv:log:3", {"type": "t", "key": "k", "payload": "{}"}).decode()
            time.sleep(0.1)
        pushed = _arrived(store, key, set(_ids(backlog + live)))
        assert {(p, o) for p, o, *_ in pushed} >= set(_ids(backlog + live)), query.lastProgress
        _committed(query, backlog + live)
    finally:
        query.stop()

    # Two readers now, each owning two of the log partitions: offsets are per partition.
    query = _real_time(spark, url, checkpoint, key, readers=2)
    try:
        later = _append(store, 10, seed=15)
        _arrived(store, key, set(_ids(later)))
        _committed(query, later)
    finally:
        query.stop()
    pushed = [json.loads(item) for item in store.lrange(key, 0, -1)]
    got = [(p, o) for p, o, *_ in pushed]
    assert sorted(got) == _ids(backlog + live + later)  # each once, none twice after the restart
    [letter] = _letters(store, "rtm@v1").values()
    assert (letter.offset, letter.stage) == (f"3:{bad}", "decode")
    assert letter.error == "cannot decode the entry: the entry has no time field."
    for what, column in (("the JVM projection", 2), ("the Python foreach", 3)):
        late = sorted(entry[column] for entry in pushed if tuple(entry[:2]) in set(_ids(live)))
        print(f"append to {what}: median {late[len(late) // 2]} ms, max {late[-1]} ms")


def test_a_micro_batch_ends_at_each_cut_for_its_pipeline(spark, store, url, tmp_path):
    """As the Python source does (tests/streaming/pipeline/test_cuts.py): a batch that would read
    past the next cut for the source's pipeline ends there, and one for another pipeline changes
    nothing."""
    keys = cut_keys(PARTITIONS)

    def cut(pipeline: str) -> dict[str, str]:
        made, _, _ = cut_of(store.eval(CUT_SCRIPT, len(keys), *keys, *cut_args([pipeline])))
        return dict(made.positions)

    offsets = _append(store, 40, seed=11)
    at = cut("views")
    cut("others")
    offsets += _append(store, 40, seed=12)
    frame = (spark.readStream.format(JVM_SOURCE).option("url", url)
             .option("partitions", str(PARTITIONS)).option("cuts", CUTS_STREAM)
             .option("pipeline", "views").load())  # fmt: skip
    batches = _drain(frame, tmp_path / "cp")
    assert sorted(_entries(batches)) == _ids(offsets)
    ends = [json.loads(text) for text in _offsets(tmp_path / "cp")]
    assert at in ends and len(batches) == 2
