"""A primary of the store cluster dies under load and its replica takes over.

Events are appended continuously, each acknowledged only once a replica has it
(``LV_STORE_ACK_REPLICAS=1``), while Chirp's pipelines run with the same setting. The primary
holding some log partitions and some change-topic shards is killed (SIGKILL); its replica
takes over within a few seconds and the appends and micro-batches go on (the sink writes a
batch again, whole, until the cluster serves it). The killed node is started again and
rejoins as a replica. Then every acknowledged event must be in the log, once, where its
acknowledgement said, and every view must equal a recomputation from the log.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from redis.cluster import RedisCluster

from demo.chirp import app as chirp
from demo.chirp.generate import Activity, seed_events
from streaming.core.changes import changes_stream
from streaming.core.events import log_stream, partition_for
from streaming.core.settings import Settings
from streaming.core.storecluster import StoreCluster
from tests.storecluster.appends import append, append_acknowledged
from tests.support.checks import assert_views_consistent
from tests.support.pipeline import RunningPipeline

NOW = 1_767_225_600_000
PARTITIONS = 4
SHARDS = 8


class Writer(threading.Thread):
    """Appends Chirp's activity one acknowledged event at a time until stopped; keeps the
    acknowledged ones (entry id -> the event) and counts the rest."""

    def __init__(self, client: RedisCluster) -> None:
        super().__init__(name="acknowledged-writer", daemon=True)
        self.client = client
        self.activity = Activity(users=10, seed=11)
        self.acknowledged: dict[tuple[int, str], dict[str, Any]] = {}
        self.failed = 0
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.is_set():
            raw = next(self.activity)
            entry_id = append_acknowledged(self.client, chirp, PARTITIONS, raw, replicas=1)
            if entry_id is None:
                self.failed += 1
                time.sleep(0.05)
                continue
            (event,) = chirp.validate_batch([raw])
            self.acknowledged[(partition_for(event.key, PARTITIONS), entry_id)] = raw
            time.sleep(0.005)

    def stop(self) -> None:
        self.halt.set()
        self.join(60)


def victim(store_cluster: StoreCluster, client: RedisCluster) -> int:
    """A node serving as primary that holds some log partitions and some change shards."""
    for node in range(store_cluster.nodes):
        if node not in store_cluster.processes or store_cluster.role(node) != "master":
            continue
        port = store_cluster.port + node
        holds = {
            key for key in [*map(log_stream, range(PARTITIONS)), *map(changes_stream, range(SHARDS))]
            if client.get_node_from_key(key).port == port
        }  # fmt: skip
        if any(k.startswith("lv:log:") for k in holds) and any("{c" in k for k in holds):
            return node
    raise AssertionError("no primary holds both log partitions and change shards")


@pytest.fixture()
def running(
    spark: Any, cluster_url: str, cluster_store: RedisCluster, tmp_path: Path
) -> Iterator[RunningPipeline]:
    settings = Settings.from_env({
        "REDIS_URL": cluster_url,
        "LV_DATA_DIR": str(tmp_path / "data"),
        "LV_CHECKPOINT_DIR": str(tmp_path / "checkpoints"),
        "LV_LOG_PARTITIONS": str(PARTITIONS),
        "LV_CHANGE_SHARDS": str(SHARDS),
        "LV_SHUFFLE_PARTITIONS": "2",
        "LV_STORE_ACK_REPLICAS": "1",
    })  # fmt: skip
    append(cluster_store, chirp, PARTITIONS, seed_events(NOW))
    pipeline = RunningPipeline(spark, settings)
    yield pipeline
    pipeline.stop()


def test_a_primary_killed_under_load_loses_no_acknowledged_event_and_no_view_change(
    store_cluster: StoreCluster, cluster_store: RedisCluster, running: RunningPipeline
) -> None:
    killed = victim(store_cluster, cluster_store)
    running.wait_until_caught_up(cluster_store, timeout=90)  # type: ignore[arg-type]
    writer = Writer(cluster_store)
    writer.start()
    try:
        time.sleep(3)
        before = len(writer.acknowledged)
        store_cluster.kill(killed)
        try:
            store_cluster.wait_ok(30)  # its replica serves its slots
            time.sleep(3)  # appends and batches go on against the promoted replica
        finally:
            store_cluster.start_node(killed)  # it rejoins as the new primary's replica
        store_cluster.wait_ok()
        time.sleep(3)
    finally:
        writer.stop()
    assert not writer.is_alive()
    assert len(writer.acknowledged) > before > 0
    assert store_cluster.role(killed) == "slave"

    running.wait_until_caught_up(cluster_store, timeout=90)  # type: ignore[arg-type]
    for (partition, entry_id), raw in writer.acknowledged.items():
        found: Any = cluster_store.xrange(log_stream(partition), entry_id, entry_id)
        assert len(found) == 1, f"acknowledged event {partition}:{entry_id} is not in the log"
        (event,) = chirp.validate_batch([raw])
        assert found[0][1] == event.encode()
    assert_views_consistent(cluster_store, PARTITIONS, SHARDS)  # type: ignore[arg-type]
