"""The figures /metrics reads from the store at each scrape (``liveviews.gateway.metrics.Figures``), with a
fresh ``Metrics`` over the test store, so that every value is known exactly."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
import redis
import redis.asyncio as aioredis
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from liveviews.changes import lag as sync_lag
from liveviews.changes.topic import FRONTIER_KEY, PROGRESS_STREAM
from liveviews.gateway.metrics import PIPELINE_PROGRESS_STREAM, Metrics, measure_all
from liveviews.log.events import log_stream
from liveviews.pipeline import versions
from liveviews.store.embedded import free_port

PIPELINES = ("entities", "activity")
PARTITIONS = 4


@pytest.fixture()
async def aclient(store: redis.Redis, store_url: str) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(store_url)
    yield client
    await client.aclose()


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a scrape: (name, sorted labels) -> value."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(text: str, name: str, **labels: str) -> float | None:
    return samples(text).get((name, tuple(sorted(labels.items()))))


def batch(client: redis.Redis, query: str, ms: float) -> None:
    client.xadd(PIPELINE_PROGRESS_STREAM, {"query": query, "batch": 1, "events": 3,
                                           "duration_ms": orjson.dumps({"triggerExecution": ms,
                                                                        "addBatch": 1})})  # fmt: skip


def progress(client: redis.Redis, pipeline: str, batch: int, rows: int | None) -> None:
    fields: dict[Any, Any] = {
        "pipeline": pipeline,
        "batch": batch,
        "frontier": "{}",
    }
    if rows is not None:
        fields |= {"rows": rows, "lag_ms": 0}
    client.xadd(PROGRESS_STREAM, fields)


async def scrape(metrics: Metrics, client: aioredis.Redis, **subscribers: int) -> str:
    return await metrics.scrape(client, PARTITIONS, PIPELINES, subscribers)


async def test_lag_of_every_version_equals_the_sync_measure(
    store: redis.Redis, aclient: aioredis.Redis
) -> None:
    appended = {0: ["1000-0", "2000-0", "5000-0"], 1: ["1500-0", "1600-0"], 3: ["900-1"]}
    # More than the cap in one partition.
    appended[2] = ["100-0", *(f"200-{n}" for n in range(sync_lag.EVENT_CAP + 5))]
    with store.pipeline(transaction=False) as pipe:
        for p, ids in appended.items():
            for entry_id in ids:
                pipe.xadd(log_stream(p), {"type": "x"}, id=entry_id)
        pipe.execute()
    frontiers = {
        "none": {},
        "some": {0: "1000-0", 1: "1600-0"},
        "head": {0: "5000-0", 1: "1600-0", 2: f"200-{sync_lag.EVENT_CAP + 4}", 3: "900-1"},
        "capped": {0: "2000-0", 1: "1500-0", 2: "100-0", 3: "900-1"},
    }
    got = await measure_all(aclient, PARTITIONS, frontiers)
    for name, frontier in frontiers.items():
        assert got[name] == sync_lag.measure(store, PARTITIONS, frontier), name
    assert got["head"] == sync_lag.Lag(0, False, 0)
    assert got["capped"].capped and got["capped"].events == 1 + 1 + sync_lag.EVENT_CAP
    assert await measure_all(aclient, PARTITIONS, {}) == {}


async def test_lag_gauges_for_the_serving_version_and_the_one_being_built(
    store: redis.Redis, aclient: aioredis.Redis
) -> None:
    versions.register(store, "entities", "abc123")
    versions.begin(store, "entities", "v2", "def456")
    for i in ("1000-0", "2000-0", "4000-0"):
        store.xadd(log_stream(0), {"type": "x"}, id=i)
    store.hset(FRONTIER_KEY, "entities", orjson.dumps({"0": "2000-0"}))
    text = await scrape(Metrics(), aclient, profiles=2, likes=0)
    serving = {"pipeline": "entities", "version": "abc123"}
    building = {"pipeline": "entities", "version": "v2"}
    assert value(text, "lv_pipeline_lag_events", **serving) == 1
    assert value(text, "lv_pipeline_lag_seconds", **serving) == 2.0
    # The version being built has no frontier yet: the whole log is ahead of it.
    assert value(text, "lv_pipeline_lag_events", **building) == 3
    assert value(text, "lv_pipeline_lag_seconds", **building) == 3.0
    # activity has never run in this store: nothing to say about it.
    assert not [k for k in samples(text) if ("pipeline", "activity") in k[1]]
    assert value(text, "lv_view_subscribers", view="profiles") == 2
    assert value(text, "lv_view_subscribers", view="likes") == 0

    store.hset(FRONTIER_KEY, "entities@v2", orjson.dumps({"0": "4000-0"}))
    text = await scrape(Metrics(), aclient)
    assert value(text, "lv_pipeline_lag_events", **building) == 0
    assert value(text, "lv_pipeline_lag_seconds", **building) == 0.0
    assert value(text, "lv_view_subscribers", view="profiles") is None


async def test_batch_durations_and_rows_changed_are_read_once_each(
    store: redis.Redis, aclient: aioredis.Redis
) -> None:
    versions.register(store, "entities", "abc123")
    versions.begin(store, "entities", "v2", "def456")
    metrics = Metrics()
    batch(store, "liveviews.entities", 120)
    batch(store, "liveviews.entities@v2", 2500)
    batch(store, "liveviews.entities@v2", 40)
    batch(store, "another.query", 10)  # not a pipeline's query
    store.xadd(PIPELINE_PROGRESS_STREAM, {"query": "liveviews.entities", "duration_ms": b"{}"})
    progress(store, "entities", 1, 5)
    progress(store, "entities@v2", 1, 700)
    progress(store, "liveviews", 1, None)  # the views' frontier: no pipeline, no rows
    progress(store, "entities", -1, 0)  # a switch of versions
    progress(store, "entities", 2, None)  # written before rows were recorded
    progress(store, "nobody", 3, 9)  # no pipeline of this application

    text = await scrape(metrics, aclient)
    serving = {"pipeline": "entities", "version": "abc123"}
    building = {"pipeline": "entities", "version": "v2"}
    duration = "lv_pipeline_batch_duration_seconds"
    assert value(text, duration + "_count", **serving) == 1
    assert value(text, duration + "_sum", **serving) == pytest.approx(0.12)
    assert value(text, duration + "_count", **building) == 2
    assert value(text, duration + "_sum", **building) == pytest.approx(2.54)
    assert value(text, duration + "_bucket", le="0.05", **building) == 1
    assert value(text, duration + "_bucket", le="2.5", **building) == 2
    rows = "lv_pipeline_rows_changed"
    assert value(text, rows + "_count", **serving) == 1
    assert value(text, rows + "_sum", **serving) == 5
    assert value(text, rows + "_bucket", le="1000.0", **building) == 1
    assert value(text, rows + "_bucket", le="100.0", **building) == 0
    assert not [k for k in samples(text) if ("pipeline", "nobody") in k[1]]

    again = await scrape(metrics, aclient)  # nothing new: nothing counted twice
    assert value(again, duration + "_count", **building) == 2
    assert value(again, rows + "_count", **serving) == 1
    batch(store, "liveviews.entities@v2", 60)
    progress(store, "entities", 3, 0)
    later = await scrape(metrics, aclient)
    assert value(later, duration + "_count", **building) == 3
    assert value(later, rows + "_count", **serving) == 2
    assert value(later, rows + "_bucket", le="0.0", **serving) == 1

    # Once the serving version is replaced and forgotten, its series leave the histograms.
    versions.switch(store, "entities", 8)
    old = versions.read(store, "entities")
    assert old is not None and old.retired
    versions.forget(store, "entities", old.retired[0])
    text = await scrape(metrics, aclient)
    assert value(text, duration + "_count", **serving) is None
    assert value(text, rows + "_count", **serving) is None
    assert value(text, duration + "_count", **building) == 3


async def test_the_first_scrape_reads_only_the_last_ten_minutes(
    store: redis.Redis, aclient: aioredis.Redis
) -> None:
    old = int((time.time() - 3600) * 1000)
    store.xadd(PROGRESS_STREAM, {"pipeline": "entities", "batch": 1, "frontier": "{}", "rows": 4},
               id=f"{old}-0")  # fmt: skip
    progress(store, "entities", 2, 6)
    text = await scrape(Metrics(), aclient)
    labels = {"pipeline": "entities", "version": ""}  # no registry: a store before versions
    assert value(text, "lv_pipeline_rows_changed_count", **labels) == 1
    assert value(text, "lv_pipeline_rows_changed_sum", **labels) == 6


async def test_a_wiped_store_is_read_again_from_its_start(
    store: redis.Redis, aclient: aioredis.Redis
) -> None:
    metrics = Metrics()
    progress(store, "entities", 1, 1)
    assert "lv_pipeline_rows_changed_count" in await scrape(metrics, aclient)
    store.flushdb()
    text = await scrape(metrics, aclient)
    assert value(text, "lv_pipeline_rows_changed_count", pipeline="entities", version="") == 1
    progress(store, "entities", 1, 3)
    text = await scrape(metrics, aclient)
    assert value(text, "lv_pipeline_rows_changed_count", pipeline="entities", version="") == 2


def test_push_latency_is_from_the_newest_entry_of_the_frontier() -> None:
    metrics = Metrics()
    metrics.frontier_pushed({"0": "1000-0", "1": "3000-5", "2": "2000-0"}, now=5.0)
    metrics.frontier_pushed({}, now=5.0)  # nothing covered: nothing to measure
    metrics.frontier_pushed({"0": "garbage"}, now=5.0)
    metrics.frontier_pushed({"0": "9000-0"}, now=5.0)  # a clock behind the store's: 0
    text = generate_latest(metrics.figures.registry).decode()
    assert value(text, "lv_push_latency_seconds_count") == 2
    assert value(text, "lv_push_latency_seconds_sum") == 2.0
    assert value(text, "lv_push_latency_seconds_bucket", le="0.005") == 1
    assert value(text, "lv_push_latency_seconds_bucket", le="2.5") == 2


async def test_an_unreachable_store_leaves_the_figures_of_this_process() -> None:
    gone = aioredis.Redis(port=free_port(), socket_connect_timeout=0.5, retry=Retry(NoBackoff(), 0))
    metrics = Metrics()
    metrics.frontier_pushed({"0": "1000-0"}, now=2.0)
    text = await scrape(metrics, gone, profiles=1)
    await gone.aclose()
    assert value(text, "lv_view_subscribers", view="profiles") == 1
    assert value(text, "lv_push_latency_seconds_count") == 1
    assert "lv_pipeline_lag_events{" not in text


def test_each_metrics_has_a_registry_of_its_own() -> None:
    a, b = Metrics(), Metrics()
    a.frontier_pushed({"0": "1000-0"}, now=2.0)
    assert a.figures.registry is not b.figures.registry
    assert value(generate_latest(a.figures.registry).decode(), "lv_push_latency_seconds_count") == 1
    assert value(generate_latest(b.figures.registry).decode(), "lv_push_latency_seconds_count") == 0


async def test_a_registry_entry_this_gateway_cannot_read_fails_no_scrape(
    store: redis.Redis, aclient: aioredis.Redis
) -> None:
    metrics = Metrics()
    store.hset(versions.REGISTRY_KEY, "entities", b"{not json")
    progress(store, "entities", 1, 8)
    text = await scrape(metrics, aclient, profiles=3)
    assert value(text, "lv_view_subscribers", view="profiles") == 3
    store.delete(versions.REGISTRY_KEY)  # readable again: the entries are read then
    text = await scrape(metrics, aclient)
    assert value(text, "lv_pipeline_rows_changed_sum", pipeline="entities", version="") == 8


async def test_lag_gauges_on_a_kafka_log(
    store: redis.Redis, aclient: aioredis.Redis, kafka_bootstrap: str
) -> None:
    from demo.chirp import app as chirp
    from liveviews.log.kafka.append import KafkaEventLog
    from liveviews.log.kafka.lag import log_ends

    topic = f"metrics-{uuid.uuid4().hex[:8]}"
    log = KafkaEventLog(kafka_bootstrap, chirp, PARTITIONS, store, topic=topic)
    try:
        for i in range(6):
            log.append({"type": "profile_set", "payload": {"user": f"u{i}", "name": "n"}})
    finally:
        log.close()
    ends = log_ends(kafka_bootstrap, topic, PARTITIONS)
    versions.register(store, "entities", "abc123")
    versions.begin(store, "entities", "v2", "def456")
    store.hset(FRONTIER_KEY, "entities", orjson.dumps({str(p): str(n) for p, n in ends.items()}))
    text = await metrics_scrape_kafka(aclient, (kafka_bootstrap, topic))
    serving = {"pipeline": "entities", "version": "abc123"}
    building = {"pipeline": "entities", "version": "v2"}
    assert value(text, "lv_pipeline_lag_events", **serving) == 0
    assert value(text, "lv_pipeline_lag_seconds", **serving) == 0.0
    assert value(text, "lv_pipeline_lag_events", **building) == 6  # nothing read yet
    assert (value(text, "lv_pipeline_lag_seconds", **building) or 0) > 0


async def metrics_scrape_kafka(client: aioredis.Redis, kafka: tuple[str, str]) -> str:
    return await Metrics().scrape(client, PARTITIONS, PIPELINES, {}, kafka)
