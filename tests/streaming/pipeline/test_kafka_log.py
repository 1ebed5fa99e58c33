"""Pipelines reading a Kafka log with Spark's own Kafka source (``liveviews.pipeline.kafkalog``):
the same views as from Redis Streams, and a frontier in Kafka's positions."""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import orjson
import pytest
import redis
from confluent_kafka import Producer

from demo.chirp import app
from demo.chirp.generate import Activity, seed_events
from liveviews.changes.topic import PROGRESS_STREAM, VIEWS_FRONTIER, read_frontier, read_snapshot
from liveviews.log import deadletters
from liveviews.log.events import Offset, partition_for
from liveviews.log.kafka.append import KafkaEventLog
from liveviews.log.kafka.lag import log_ends
from liveviews.log.kafka.records import position
from liveviews.pipeline import versions
from liveviews.pipeline.kafkalog import connector_jars
from liveviews.pipeline.offsetlog import parse
from liveviews.pipeline.settings import Settings
from tests.support.checks import assert_served_views_consistent, assert_views_consistent
from tests.support.kafkalog import covers, read_kafka_log
from tests.support.pipeline import RunningPipeline

NOW = 1_767_225_600_000


@pytest.fixture()
def kafka_settings(settings: Settings, kafka_bootstrap: str) -> Settings:
    assert connector_jars(), "Spark's Kafka source is not fetched: run scripts/setup.sh"
    # Every pipeline in micro-batches: Chirp's ``profiles`` in Real-Time Mode would hold a
    # reader task per partition (tests/streaming/realtime/test_kafka.py).
    return dataclasses.replace(settings, kafka=kafka_bootstrap, realtime=False,
                               kafka_topic=f"log-{uuid.uuid4().hex[:8]}")  # fmt: skip


@pytest.fixture()
def kafka_log(kafka_settings: Settings, store: redis.Redis) -> Iterator[KafkaEventLog]:
    assert kafka_settings.kafka is not None
    writer = KafkaEventLog(kafka_settings.kafka, app, kafka_settings.log_partitions, store,
                           topic=kafka_settings.kafka_topic)  # fmt: skip
    yield writer
    writer.close()


def wait_for_frontier(store: redis.Redis, running: RunningPipeline, offsets: Sequence[Offset],
                      timeout: float = 90.0) -> dict[str, str]:  # fmt: skip
    """The views' frontier once it covers ``offsets``: compared as Kafka positions (numbers)."""
    deadline = time.monotonic() + timeout
    while True:
        running.assert_running()
        frontier = read_frontier(store, VIEWS_FRONTIER)
        if covers(frontier, offsets):
            return {str(p): v for p, v in frontier.items()}
        assert time.monotonic() < deadline, f"frontier {frontier} does not cover {offsets}"
        time.sleep(0.05)


def ends_of(log: KafkaEventLog) -> dict[int, int]:
    return log_ends(log.bootstrap, log.topic, log.partitions)


def test_views_from_a_kafka_log_equal_the_recomputation(
    spark: Any, kafka_settings: Settings, kafka_log: KafkaEventLog, store: redis.Redis
) -> None:
    """The views made from a Kafka log equal their recomputation from the same log."""
    parts = kafka_settings.log_partitions
    running = RunningPipeline(spark, kafka_settings)
    try:
        activity = Activity(users=8, seed=5)
        batches = [seed_events(NOW), *(activity.take(120) for _ in range(3))]
        offsets: list[Offset] = []
        for batch in batches:
            events = app.validate_batch(batch)
            offsets += kafka_log.append_validated(events)
        frontier = wait_for_frontier(store, running, offsets)
        # Caught up, the frontier is each partition's end in Kafka (past the last record, and
        # past the marker that commits its transaction, which takes an offset too).
        assert {int(p): int(v) for p, v in frontier.items()} == ends_of(kafka_log)
        timeline = read_snapshot(store, "timeline", "alice", kafka_settings.change_shards)
        assert "bob:seed0" in timeline.rows
        log = read_kafka_log(kafka_log.bootstrap, kafka_log.topic, parts, len(offsets))
        assert_views_consistent(store, parts, kafka_settings.change_shards, log=log)

        # A rename after the pipeline caught up reaches the views, and the frontier moves on.
        (renamed,) = kafka_log.append_batch(
            [{"type": "profile_set", "payload": {"user": "bob", "name": "Robert"}}]
        )
        wait_for_frontier(store, running, [renamed])
        tweet = read_snapshot(store, "tweets", "bob:seed0", kafka_settings.change_shards)
        assert tweet.rows["tweet"]["name"] == "Robert"
        log = read_kafka_log(kafka_log.bootstrap, kafka_log.topic, parts, len(offsets) + 1)
        assert_views_consistent(store, parts, kafka_settings.change_shards, log=log)
    finally:
        running.stop()


def test_a_rebuild_on_a_kafka_log_reads_the_topic_from_its_first_record(
    spark: Any, kafka_settings: Settings, kafka_log: KafkaEventLog, store: redis.Redis
) -> None:
    """``liveviews rebuild`` on a Kafka log: the new version is built beside the serving one
    from the topic's first record, readers are switched to it, and what it serves equals the
    recomputation, then and after another event. Readers are switched only once the new
    version is within the switch distance of the serving one (several of its batches here)."""
    parts, shards = kafka_settings.log_partitions, kafka_settings.change_shards
    settings = dataclasses.replace(kafka_settings, rebuild_max_events_per_batch=40)
    running = RunningPipeline(spark, settings)
    try:
        events = [seed_events(NOW), *(Activity(users=8, seed=11).take(150) for _ in range(2))]
        offsets = [o for batch in events for o in kafka_log.append_batch(batch)]
        wait_for_frontier(store, running, offsets)
        for pipeline in ("entities", "profiles"):  # a state processor, and a declared query
            before = versions.read(store, pipeline)
            running.rebuild(store, pipeline)
            now = versions.read(store, pipeline)
            assert before is not None and now is not None and now.active != before.active
            # No event came during the rebuild: the serving version was at the log's ends.
            behind = sum(end - int(switched_at(store, pipeline).get(str(p), "0"))
                         for p, end in ends_of(kafka_log).items())  # fmt: skip
            assert 0 <= behind <= settings.rebuild_switch_distance, (pipeline, behind)
        log = read_kafka_log(kafka_log.bootstrap, kafka_log.topic, parts, len(offsets))
        assert_served_views_consistent(store, app, parts, shards, log=log)

        (renamed,) = kafka_log.append_batch(
            [{"type": "profile_set", "payload": {"user": "bob", "name": "Rebuilt"}}]
        )
        frontier = wait_for_frontier(store, running, [renamed])
        # Past the transaction's commit marker too: at every partition's end, as before.
        assert {int(p): int(v) for p, v in frontier.items()} == ends_of(kafka_log)
        entities = versions.read(store, "entities")
        assert entities is not None and entities.active is not None
        tweet = read_snapshot(store, "tweets", "bob:seed0", shards, entities.active.namespace)
        assert tweet.rows["tweet"]["name"] == "Rebuilt"
        log = read_kafka_log(kafka_log.bootstrap, kafka_log.topic, parts, len(offsets) + 1)
        assert_served_views_consistent(store, app, parts, shards, log=log)
    finally:
        running.stop()


def switched_at(store: redis.Redis, pipeline: str) -> dict[str, str]:
    """The new version's frontier when readers were switched to it: the progress entry the
    switch wrote."""
    entries: Any = store.xrange(PROGRESS_STREAM)
    (frontier,) = [f[b"frontier"] for _, f in entries if f.get(b"switch") == pipeline.encode()]
    return dict(orjson.loads(frontier))


def test_a_kafka_offset_in_the_offset_log_is_the_frontier_as_it_is() -> None:
    assert parse('{"liveviews.log": {"0": 42, "1": 0, "3": 7}}') == {0: "42", 3: "7"}
    assert parse('{"0": "17-2", "1": "0-0"}') == {0: "17-2"}


def test_records_that_are_not_events_are_set_aside_by_every_pipeline_on_a_kafka_log(
    spark: Any, kafka_settings: Settings, kafka_log: KafkaEventLog, store: redis.Redis
) -> None:
    """Another producer's records that are not events of the application become dead letters
    of each pipeline, as on Redis Streams (liveviews.pipeline.kafkascreen); the others take
    effect, and the views equal the recomputation without them."""
    parts = kafka_settings.log_partitions
    offsets = kafka_log.append_validated(app.validate_batch(seed_events(NOW)))
    bob = partition_for("bob", parts)
    producer = Producer({"bootstrap.servers": kafka_log.bootstrap, "enable.idempotence": True})
    bad: dict[str, str] = {}

    def raw(why: str, key: str, value: bytes | None, headers: dict[str, bytes],
            partition: int = bob) -> None:  # fmt: skip
        def delivered(err: Any, msg: Any) -> None:
            assert err is None, err
            bad[f"{msg.partition()}:{position(msg.offset())}"] = why

        producer.produce(kafka_log.topic, value, key.encode(), partition=partition,
                         headers=list(headers.items()), on_delivery=delivered)  # fmt: skip

    tweet = orjson.dumps({"user": "bob", "tweet": "bob:x", "text": "hi"})
    good = {"type": b"tweet_posted", "time": str(NOW).encode()}
    raw("time, payload", "bob", None, {"type": b"tweet_posted"})
    raw("JSON", "bob", b"{not json", good)
    raw("not declared", "bob", tweet, {**good, "type": b"poke"})
    raw("millisec", "bob", tweet, {**good, "time": b"soon"})
    raw("partition key", "carol", tweet, good)
    raw("required", "bob", b'{"user": "bob"}', good)
    raw("UTF-8", "bob", tweet, {**good, "type": b"\xff\xfe"})
    raw("another log partition", "bob", tweet, good, partition=(bob + 1) % parts)
    assert producer.flush(30) == 0 and len(bad) == 8
    offsets += kafka_log.append_batch([{"type": "tweet_posted", "payload": {
        "user": "bob", "tweet": "bob:after", "text": "still here"}}])  # fmt: skip

    running = RunningPipeline(spark, kafka_settings)
    try:
        wait_for_frontier(store, running, offsets)
        assert read_snapshot(store, "tweets", "bob:after", kafka_settings.change_shards).rows
        for pipeline in app.pipelines:
            for offset, why in bad.items():
                found = deadletters.show(store, pipeline, offset)
                assert found is not None, (pipeline, offset, why)
                assert found.stage == deadletters.STAGE_DECODE, found
                assert why in found.error, (why, found.error)
        log = read_kafka_log(kafka_log.bootstrap, kafka_log.topic, parts, len(offsets),
                             skip=bad)  # fmt: skip
        assert_views_consistent(store, parts, kafka_settings.change_shards, log=log)
    finally:
        running.stop()
