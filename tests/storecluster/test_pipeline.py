"""Chirp's pipelines on a store cluster, on the run's local SparkSession: the views equal a
recomputation from the log through a restart of the pipeline, and through a rebuild whose
switch is cut short between its steps."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from redis.cluster import RedisCluster

from demo.chirp import app as chirp
from demo.chirp.generate import Activity, seed_events
from liveviews.changes.topic import ACTIVE_KEY, read_snapshot
from liveviews.log.eventlog import EventLog
from liveviews.pipeline import versions
from liveviews.pipeline.settings import Settings
from tests.support.checks import assert_views_consistent
from tests.support.pipeline import RunningPipeline
from tests.support.reference import recompute

NOW = 1_767_225_600_000
PARTITIONS = 4
SHARDS = 8


def cluster_settings(url: str, where: Path, **env: str) -> Settings:
    """A pipeline's settings on the cluster at ``url``, its files under ``where``, and ``env``."""
    return Settings.from_env({
        "REDIS_URL": url,
        "LV_DATA_DIR": str(where / "data"),
        "LV_CHECKPOINT_DIR": str(where / "checkpoints"),
        "LV_LOG_PARTITIONS": str(PARTITIONS),
        "LV_CHANGE_SHARDS": str(SHARDS),
        "LV_SHUFFLE_PARTITIONS": "2",
        "LV_REBUILD_GRACE_SECONDS": "3600",
        "LV_REALTIME": os.environ["LV_REALTIME"],  # micro-batches: tests/conftest.py
        **env,
    })  # fmt: skip


def append(client: RedisCluster, raws: list[dict[str, Any]]) -> None:
    """Through the event log, as a producer appends: one call per partition's server."""
    EventLog(client, chirp, PARTITIONS).append_batch(raws)


@pytest.fixture()
def settings(cluster_url: str, tmp_path: Path) -> Settings:
    return cluster_settings(cluster_url, tmp_path)


@pytest.fixture()
def running(
    spark: Any, settings: Settings, cluster_store: RedisCluster
) -> Iterator[list[RunningPipeline]]:
    """The pipelines started by a test (a restart starts another), stopped after it."""
    started: list[RunningPipeline] = []
    yield started
    for pipeline in started:
        pipeline.stop()


def test_chirp_views_on_a_cluster_equal_the_log_through_a_restart(
    spark: Any, settings: Settings, cluster_store: RedisCluster, running: list[RunningPipeline]
) -> None:
    activity = Activity(users=10, seed=5)
    append(cluster_store, seed_events(NOW))
    running.append(RunningPipeline(spark, settings))
    for _ in range(2):
        append(cluster_store, activity.take(150))
        running[-1].wait_until_caught_up(cluster_store)  # type: ignore[arg-type]
    append(cluster_store, activity.take(150))
    running[-1].stop()  # mid-stream: what it had not committed is read again
    append(cluster_store, activity.take(150))
    running.append(RunningPipeline(spark, settings))
    append(cluster_store, activity.take(150))
    running[-1].wait_until_caught_up(cluster_store)  # type: ignore[arg-type]
    deltas = assert_views_consistent(cluster_store, PARTITIONS, SHARDS)  # type: ignore[arg-type]
    assert deltas > 100


def _served(client: RedisCluster, pipeline: str) -> dict[tuple[str, str], dict[str, Any]]:
    """What a subscriber of each of ``pipeline``'s views is served: the snapshot of the version
    ``lv:{m}:active`` names, for every key of the recomputation."""
    namespace = (client.hget(ACTIVE_KEY, pipeline) or b"").decode()  # type: ignore[union-attr]
    views = set(chirp.pipelines[pipeline].views)
    expected = recompute(client, PARTITIONS)  # type: ignore[arg-type]
    return {
        (view, key): read_snapshot(client, view, key, SHARDS, namespace).rows
        for view, key in expected
        if view in views
    }


def test_a_rebuild_on_a_cluster_switches_readers_even_when_its_switch_is_cut_short(
    spark: Any,
    settings: Settings,
    cluster_store: RedisCluster,
    running: list[RunningPipeline],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    activity = Activity(users=10, seed=7)
    append(cluster_store, seed_events(NOW))
    append(cluster_store, activity.take(200))
    pipeline = RunningPipeline(spark, settings)
    running.append(pipeline)
    pipeline.wait_until_caught_up(cluster_store)  # type: ignore[arg-type]
    before = versions.read(cluster_store, "profiles")  # type: ignore[arg-type]
    assert before is not None and before.active is not None

    # The first switch dies after every shard publishes both versions, before readers move.
    client = pipeline.versioning.client
    real = client.transaction
    cuts: list[str] = []

    def cut_once(func: Any, *watches: Any, **options: Any) -> Any:
        if "lv:{m}:frontier" in watches and not cuts:
            cuts.append("switch")
            raise redis.ConnectionError("the store went away between the switch's steps")
        return real(func, *watches, **options)

    monkeypatch.setattr(client, "transaction", cut_once)
    versions.ask(cluster_store, "profiles", "rebuild")  # type: ignore[arg-type]
    deadline = time.monotonic() + 120
    while True:
        now = versions.read(cluster_store, "profiles")  # type: ignore[arg-type]
        assert now is not None
        if now.active is not None and now.active.version != before.active.version:
            break
        assert time.monotonic() < deadline, "profiles was not rebuilt in time"
        with contextlib.suppress(redis.ConnectionError):  # as the pipeline process: tried again
            pipeline.versioning.tick()
        append(cluster_store, activity.take(5))  # readers see new events
        time.sleep(0.1)
    assert cuts == ["switch"]
    append(cluster_store, activity.take(100))
    pipeline.wait_until_caught_up(cluster_store)  # type: ignore[arg-type]
    expected = recompute(cluster_store, PARTITIONS)  # type: ignore[arg-type]
    served = _served(cluster_store, "profiles")
    assert served and all(rows == expected[k] for k, rows in served.items())
    live = [cluster_store.hgetall(f"lv:{{c{s}}}:live") for s in range(SHARDS)]
    assert all(h.get(b"profiles") == now.active.namespace.encode() for h in live)
    assert not any(b"profiles:next" in h for h in live)
    # The replaced version stopped; nothing but the serving versions run.
    assert before.active.qualified("profiles") not in pipeline.versioning.running


def test_a_pipeline_in_real_time_mode_is_refused_on_a_store_cluster(
    spark: Any, settings: Settings, cluster_store: RedisCluster
) -> None:
    from demo.chirp import app as chirp
    from liveviews.pipeline.plan import PipelineRefused
    from liveviews.pipeline.queries import sink_client, start_pipeline

    on = dataclasses.replace(settings, realtime=True)  # profiles as Chirp declares it
    with pytest.raises(PipelineRefused, match=r"REDIS_URL names a store cluster\. Run it in "
                                              r"micro-batches there: LV_REALTIME=off\."):  # fmt: skip
        start_pipeline(spark, chirp, on, "profiles", sink_client(settings))
    off = dataclasses.replace(settings, realtime=False)  # LV_REALTIME=off: a micro-batch query
    query = start_pipeline(spark, chirp, off, "profiles", sink_client(off))
    query.stop()
