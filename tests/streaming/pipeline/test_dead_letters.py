"""Bad events never stop the pipeline: each is set aside as a dead letter, the rest take effect."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time
import uuid

import orjson
import pytest

from demo.chirp import app
from demo.chirp.generate import Activity, seed_events
from liveviews.changes.topic import read_snapshot
from liveviews.log import deadletters
from liveviews.log.eventlog import EventLog, views_caught_up
from liveviews.log.events import MAX_EVENT_TIME_MS, Offset, log_stream, partition_for
from liveviews.log.kafka.append import KafkaEventLog
from tests.support.checks import assert_views_consistent
from tests.support.kafkalog import frontier_covers

NOW = 1_767_225_600_000


def _raw(store, settings, key: str, fields: dict[str, object]) -> str:
    """An entry written straight into the log, as another producer could; its offset."""
    p = partition_for(key, settings.log_partitions)
    entry_id = store.xadd(log_stream(p), {k: v for k, v in fields.items()})
    return f"{p}:{entry_id.decode()}"


def _tweet(user: str, suffix: str, time_ms: int) -> dict[str, object]:
    payload = {"user": user, "tweet": f"{user}:{suffix}", "text": "hi"}
    return {"type": "tweet_posted", "key": user, "time": time_ms, "payload": orjson.dumps(payload)}


def test_entries_that_cannot_be_decoded_are_set_aside_and_later_events_appear(
    store, settings, pipeline
):
    log = EventLog(store, app, settings.log_partitions)
    log.append_batch(seed_events(NOW))
    bad = {
        _raw(store, settings, "bob", {"type": "tweet_posted", "key": "bob"}): "no time, payload",
        _raw(store, settings, "bob", {**_tweet("bob", "x1", NOW), "payload": b"{not json"}): "JSON",
        _raw(store, settings, "bob", {**_tweet("bob", "x2", NOW), "type": "poke"}): "not declared",
        _raw(store, settings, "bob", {**_tweet("bob", "x3", NOW), "time": b"soon"}): "millisec",
        _raw(store, settings, "bob", {**_tweet("bob", "x4", NOW), "key": "carol"}): "partition",
        _raw(store, settings, "bob", {**_tweet("bob", "x5", NOW), "payload": b'{"user":"bob"}'}):
            "required",
        _raw(store, settings, "bob", {**_tweet("bob", "x6", NOW), "type": b"\xff\xfe"}): "UTF-8",
    }  # fmt: skip
    log.append({"type": "tweet_posted", "payload": {"user": "bob", "tweet": "bob:after",
                                                    "text": "still here"}})  # fmt: skip
    pipeline.wait_until_caught_up(store)

    assert read_snapshot(store, "tweets", "bob:after", settings.change_shards).rows
    for pipeline_name in app.pipelines:
        for offset, why in bad.items():
            found = deadletters.show(store, pipeline_name, offset)
            assert found is not None, (pipeline_name, offset)
            assert found.stage == deadletters.STAGE_DECODE and why in found.error, found.error
            assert found.event is not None and found.pipeline == pipeline_name
    for suffix in ("x1", "x2", "x3", "x4", "x5", "x6"):
        assert not read_snapshot(store, "tweets", f"bob:{suffix}", settings.change_shards).rows
    assert deadletters.counts(store, app.pipelines) == {p: len(bad) for p in app.pipelines}
    listed = deadletters.listed(store, "entities")
    assert [d.offset for d in listed] == list(bad)  # in the order recorded


def test_an_event_from_year_9999_is_rendered_or_left_out_never_a_dead_letter(
    store, settings, pipeline
):
    """A tweet dated in year 9999, written straight into the log (the gateway refuses such a
    time): the entities view renders it; the activity view, a query, leaves out an event dated
    after its arrival, so Spark's watermark does not jump to year 9999 and close every window:
    the events of a later micro-batch are still counted."""
    log = EventLog(store, app, settings.log_partitions)
    far = _raw(store, settings, "dave", _tweet("dave", "future", MAX_EVENT_TIME_MS - 1))
    log.append_batch(seed_events(NOW))
    pipeline.wait_until_caught_up(store)
    log.append_batch(seed_events(NOW + 1000))
    pipeline.wait_until_caught_up(store)

    assert deadletters.show(store, "activity", far) is None
    assert deadletters.show(store, "entities", far) is None
    windows = read_snapshot(store, "activity", "global", settings.change_shards).rows
    assert sum(w["total"] for w in windows.values()) == 2 * len(seed_events(NOW))
    assert read_snapshot(store, "tweets", "dave:future", settings.change_shards).rows


def test_views_with_bad_events_equal_a_recomputation_without_them(store, settings, pipeline):
    log = EventLog(store, app, settings.log_partitions)
    activity = Activity(users=10, seed=5)
    bad = []
    for i in range(4):
        log.append_batch(activity.take(120))
        bad.append(
            _raw(store, settings, "erin", {**_tweet("erin", f"b{i}", NOW), "payload": b"[]"})
        )
        pipeline.wait_until_caught_up(store)
    assert {d.offset for d in deadletters.listed(store, "entities")} == set(bad)
    assert_views_consistent(store, settings.log_partitions, settings.change_shards, skip=bad)


def _notes_app(isolate: bool):
    """An application whose view raises on some events depending on its state: a note
    ``"boom"`` that would be a key's third (sixth, ...) raises, wherever it falls in a
    micro-batch. With ``isolate``, its processor is wrapped by ``isolated``. Declared in a
    function, so Spark's workers get the processor by value."""
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor
    from pyspark.sql.types import LongType, StructField, StructType

    from liveviews import App, Schema, String
    from liveviews.pipeline.isolation import isolated
    from liveviews.pipeline.views import CHANGE_SCHEMA, Changes

    notes_app = App("notes")
    notes_app.event_type("note", Schema({"user": String(), "text": String()}),
                         lambda p: p["user"])  # fmt: skip
    notes_app.view("notes")

    class Notes(StatefulProcessor):
        def init(self, handle):
            self.count = handle.getValueState("count", StructType([StructField("n", LongType())]))

        def handleInputRows(self, key, rows, timerValues):
            stored = self.count.get()
            n = stored[0] if stored else 0
            changes = Changes()
            for row in sorted(rows, key=lambda r: r["offset"]):
                text = orjson.loads(row["payload"])["text"]
                n += 1
                if text == "boom" and n % 3 == 0:
                    raise RuntimeError(f"note {n} of {key[0]} went boom")
                changes.upsert("notes", key[0], "count", {"n": n, "last": text})
            self.count.update((n,))
            return iter(changes.rows())

        def close(self):
            pass

    @notes_app.pipeline("notes", views=["notes"])
    def notes(events):
        processor = isolated(Notes()) if isolate else Notes()
        return (
            events.select("partition", "offset", "key", "payload")
            .groupBy("key")
            .transformWithState(processor, CHANGE_SCHEMA, "Update", "None")
        )

    return notes_app


def _note(user: str, text: str) -> dict[str, object]:
    return {"type": "note", "payload": {"user": user, "text": text}}


def test_a_processor_error_depending_on_state_sets_aside_exactly_that_event(spark, store, settings):
    from liveviews.pipeline.versioning import start

    notes_app = _notes_app(isolate=True)
    log = EventLog(store, notes_app, settings.log_partitions)
    texts = ["a", "b", "boom", "c", "boom", "boom", "d"]
    # Counting only kept notes: a(1) b(2) boom(3: raises, set aside) c(3) boom(4) boom(5) d(6).
    offsets = log.append_batch([_note("u", t) for t in texts])
    queries = start(spark, notes_app, settings)
    try:
        _caught_up(store, settings, queries)
        # Later batches count on from the kept notes only: e(7), boom(8) is kept.
        log.append_batch([_note("u", t) for t in ["e", "boom", "f"]])
        _caught_up(store, settings, queries)
        letters = deadletters.listed(store, "notes")
        assert [d.offset for d in letters] == [str(offsets[2])]
        assert "note 3 of u went boom" in letters[0].error and letters[0].batch is not None
        row = read_snapshot(store, "notes", "u", settings.change_shards).rows["count"]
        assert row == {"n": 9, "last": "f"}

        # The operator's command lists it, shows it, and replays it: as the 10th note, kept.
        listed = orjson.loads(_command(settings, "list", "--pipeline", "notes", "--json"))
        assert [d["offset"] for d in listed] == [str(offsets[2])]
        shown = orjson.loads(_command(settings, "show", "notes", str(offsets[2]), "--json"))
        assert "went boom" in shown["error"] and "Traceback" in shown["traceback"]
        assert "boom" in orjson.dumps(shown["event"]).decode()
        replayed = orjson.loads(_command(settings, "replay", "notes", str(offsets[2]), "--json"))
        _caught_up(store, settings, queries)
    finally:
        for q in queries:
            q.stop()
    row = read_snapshot(store, "notes", "u", settings.change_shards).rows["count"]
    assert row == {"n": 10, "last": "boom"}
    assert deadletters.show(store, "notes", str(offsets[2])).replayed_as == replayed["as"]
    assert deadletters.counts(store, ["notes"]) == {"notes": 1}
    missing = subprocess.run(
        [sys.executable, "-m", "liveviews", "deadletters", "show", "notes", "0:1-1"],
        env={**os.environ, "REDIS_URL": settings.store_url}, capture_output=True, text=True,
    )  # fmt: skip
    assert missing.returncode == 1 and "no dead letter at 0:1-1" in missing.stderr


def _caught_up(store, settings, queries) -> None:
    deadline = time.monotonic() + 60
    while not views_caught_up(store, settings.log_partitions):
        assert queries[0].exception() is None, queries[0].exception()
        assert time.monotonic() < deadline
        time.sleep(0.05)


def _command(settings, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "liveviews", "deadletters", *args],
        env={**os.environ, "REDIS_URL": settings.store_url}, capture_output=True, text=True,
        check=True,
    )  # fmt: skip
    return done.stdout


@pytest.mark.parametrize("on", ["store", "kafka"])
def test_a_batch_that_fails_outside_isolation_is_set_aside_whole_and_the_pipeline_goes_on(
    spark, store, settings, on, request
):
    from liveviews.pipeline.queries import sink_client
    from liveviews.pipeline.recovery import Recovery, log_entries
    from liveviews.pipeline.versioning import start_versions

    brittle = _notes_app(isolate=False)
    if on == "kafka":
        bootstrap = request.getfixturevalue("kafka_bootstrap")
        settings = dataclasses.replace(settings, kafka=bootstrap,
                                       kafka_topic=f"log-{uuid.uuid4().hex[:8]}")  # fmt: skip
        log = KafkaEventLog(bootstrap, brittle, settings.log_partitions, store,
                            topic=settings.kafka_topic)  # fmt: skip
    else:
        log = EventLog(store, brittle, settings.log_partitions)
    appended: list[Offset] = []

    def append(batch: list[dict[str, object]]) -> list[Offset]:
        offsets = log.append_batch(batch)
        appended.extend(offsets)
        return offsets

    def caught_up() -> bool:
        if on == "store":
            return views_caught_up(store, settings.log_partitions)
        return frontier_covers(store, appended)

    first = append([_note("u", "a"), _note("v", "b")])
    versioning = start_versions(spark, brittle, settings)
    queries = versioning.queries
    client = sink_client(settings)
    recovery = Recovery(client, log_entries(settings, client))

    def run_until_caught_up() -> None:
        deadline = time.monotonic() + 90
        while not caught_up():
            assert recovery.check(queries, versioning.restart) is None
            assert time.monotonic() < deadline
            time.sleep(0.05)

    try:
        run_until_caught_up()
        # u's boom would be its third note: the unisolated processor fails the whole batch.
        bad = append([_note("u", "c"), _note("u", "boom"), _note("v", "d")])
        run_until_caught_up()
        after = append([_note("u", "e")])
        run_until_caught_up()
    finally:
        for q in versioning.queries.values():
            q.stop()
        if on == "kafka":
            log.close()
    letters = deadletters.listed(store, "notes")
    assert {d.offset for d in letters} == {str(o) for o in bad}
    assert all(d.stage == deadletters.STAGE_BATCH for d in letters)
    assert all(d.event is not None and d.event["type"] == "note" for d in letters)
    assert "note 3 of u went boom" in letters[0].error
    u = read_snapshot(store, "notes", "u", settings.change_shards).rows["count"]
    assert u == {"n": 2, "last": "e"}
    v = read_snapshot(store, "notes", "v", settings.change_shards).rows["count"]
    assert v == {"n": 1, "last": "b"}
    assert first and after


@pytest.mark.parametrize(
    "reason",
    [
        "NOREPLICAS Not enough good replicas to write. script: ...",
        "MISCONF Errors writing to the AOF file: No space left on device",
        "READONLY You can't write against a read only replica.",
    ],
)
def test_a_store_that_takes_no_writes_is_no_fault_of_the_events(reason: str) -> None:
    """A sink refused by a store that takes no writes (its disk guard, a disk it cannot write, a
    replica) failed the batch as Spark reports a Python error: the batch's events would have
    been set aside as dead letters, for a fault of the store's."""
    from liveviews.pipeline.recovery import is_view_failure

    failure = (
        "pyspark.errors.exceptions.captured.StreamingQueryException: [FOREACH_BATCH_USER_FUNCTION"
        f"_ERROR] ... PythonException: redis.exceptions.ResponseError: {reason}"
    )
    assert not is_view_failure(failure)
    assert is_view_failure(failure.replace(f"redis.exceptions.ResponseError: {reason}",
                                           "KeyError: 'user'"))  # fmt: skip
