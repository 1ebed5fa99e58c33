"""Declared views in Real-Time Mode over a Kafka log: Spark's own Kafka source, one reader task
per partition of the topic, the JVM writer, and a frontier in Kafka's positions.

The shop's likes go to a topic of two partitions, counted by its ``likes`` pipeline alone (a
reader per partition and one state partition: the query's three task slots fit the run's
local[4]). Their changes must reach the change topic while the epoch that holds them runs; a
query stopped in the middle of an epoch and started again must neither repeat a delta nor show
an older count again; a record of another producer is left out; and once caught up the frontier
is the offset after each partition's last record, with nothing but a commit marker past it.
"""

from __future__ import annotations

import dataclasses
import random
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from confluent_kafka import Producer

from liveviews import App
from liveviews.changes.topic import read_frontier, realtime_attempts_key
from liveviews.log.events import Offset
from liveviews.log.kafka.append import KafkaEventLog
from liveviews.log.kafka.lag import measure_all
from liveviews.pipeline.kafkalog import connector_jars
from liveviews.pipeline.plan import PipelineRefused
from liveviews.pipeline.settings import Settings
from liveviews.store.embedded import EmbeddedStore, free_port
from tests.faults.harness import wait_until
from tests.streaming.pipeline import test_declared as shop
from tests.streaming.realtime.test_pipeline import _likes, assert_like_counts_only_grew
from tests.support.checks import replayed_views, stored_views
from tests.support.kafkalog import covers
from tests.support.pipeline import RunningPipeline

PARTITIONS = 2


@pytest.fixture()
def own_store_url(tmp_path: Path) -> Iterator[str]:
    """A store of the test's own: the run's is followed by gateways that record its layout
    (four partitions) whenever they find it empty, and these tests' topic has two."""
    with EmbeddedStore(tmp_path / "store", free_port()) as url:
        yield url


@pytest.fixture()
def store(own_store_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(own_store_url)
    yield client
    client.close()


@pytest.fixture()
def kafka_settings(settings: Settings, kafka_bootstrap: str, own_store_url: str) -> Settings:
    assert connector_jars(), "Spark's Kafka source is not fetched: run scripts/setup.sh"
    return dataclasses.replace(settings, redis_url=own_store_url, kafka=kafka_bootstrap,
                               log_partitions=PARTITIONS,
                               kafka_topic=f"log-{uuid.uuid4().hex[:8]}")  # fmt: skip


@pytest.fixture()
def kafka_log(kafka_settings: Settings, store: redis.Redis) -> Iterator[KafkaEventLog]:
    assert kafka_settings.kafka is not None
    writer = KafkaEventLog(kafka_settings.kafka, shop.app, PARTITIONS, store,
                           topic=kafka_settings.kafka_topic)  # fmt: skip
    yield writer
    writer.close()


def likes_in_realtime(interval: str) -> App:
    """The shop's like counts alone, in Real-Time Mode with epochs ``interval`` long."""
    app = App("shop", event_types=shop.app.event_types)
    app.views["like_counts"] = shop.app.views["like_counts"]
    app.pipeline("likes", views=["like_counts"], realtime=True, trigger_interval=interval,
                 partitions=1, version="rt1")(shop.likes)  # fmt: skip
    return app


def test_changes_from_kafka_arrive_within_an_epoch_and_a_replay_repeats_none(
    store: redis.Redis, kafka_settings: Settings, kafka_log: KafkaEventLog, spark: object
) -> None:
    settings = kafka_settings
    likes = _likes(random.Random(13), 60)
    running = RunningPipeline(spark, settings, likes_in_realtime("10 minutes"))
    try:
        kafka_log.append_batch(likes[:40])
        expected = shop._recompute(likes[:40])
        wait_until("the views took the first likes",
                   lambda: stored_views(store, settings.change_shards) == expected)  # fmt: skip
        # A 10-minute epoch has not ended: the changes came as they were made.
        assert read_frontier(store, "likes") == {}
        query = next(q for q in running.queries if q.name.endswith(".likes"))
        assert query.lastProgress is None  # no epoch reported, none checkpointed
    finally:
        running.stop()  # in the middle of the epoch: Spark runs it again from its start
    assert store.smembers(realtime_attempts_key("likes", 0))

    running = RunningPipeline(spark, settings, likes_in_realtime("2 seconds"))
    try:
        # A record of another producer, without the event's headers, is left out.
        other = Producer({"bootstrap.servers": kafka_log.bootstrap})
        other.produce(kafka_log.topic, value=b"not an event", partition=0)
        other.flush(10)
        offsets: list[Offset] = kafka_log.append_batch(likes[40:])
        wait_until("the frontier covers every like",
                   lambda: covers(read_frontier(store, "likes"), offsets), timeout=90)  # fmt: skip
        # Each partition's last record read; only the likes' commit marker is past it.
        last = {o.partition: int(o.id) for o in sorted(offsets, key=lambda o: int(o.id))}
        wait_until("the frontier is past the other producer's record",
                   lambda: read_frontier(store, "likes").get(0) == "1")  # fmt: skip
        assert {p: int(v) for p, v in read_frontier(store, "likes").items()} == {0: 1} | last
        frontier = {"likes": read_frontier(store, "likes")}
        lag = measure_all(kafka_log.bootstrap, kafka_log.topic, PARTITIONS, frontier)
        assert lag["likes"].events == 0
    finally:
        running.stop()
    expected = shop._recompute(likes)
    assert stored_views(store, settings.change_shards) == expected
    replayed, _ = replayed_views(store, settings.change_shards, streamed=("likes",))
    assert replayed == expected
    assert_like_counts_only_grew(store, settings.change_shards)


def test_a_topic_with_more_partitions_than_slots_is_refused_with_the_count(
    store: redis.Redis, kafka_settings: Settings, spark: object
) -> None:
    """Each of the topic's partitions holds a reader task for the whole epoch: eight of them
    and a state partition do not fit the run's local[4], and the start says so."""
    settings = dataclasses.replace(kafka_settings, log_partitions=8)
    with pytest.raises(PipelineRefused, match=r"in Real-Time Mode its query needs 9 task slots "
                       r"at once \(8 to read the log, 1 for its state partitions\), and the "
                       r"master has 4"):  # fmt: skip
        RunningPipeline(spark, settings, likes_in_realtime("2 seconds"))
