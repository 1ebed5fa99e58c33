"""A primary of the store cluster dies under load and its replica takes over; a replica freezes
and falls behind its primary.

Events are appended continuously through the event log, each acknowledged only once a
replica has it (``LV_STORE_ACK_REPLICAS=1``) and tried again under its idempotency key until
it is, while Chirp's pipelines run with the same setting. The primary
holding some log partitions and some change-topic shards is killed (SIGKILL); its replica
takes over within a few seconds and the appends and micro-batches go on (the sink writes a
batch again, whole, until the cluster serves it). The killed node is started again and
rejoins as a replica. Then every acknowledged event must be in the log once, where its
acknowledgement said, and every view must equal a recomputation from the log.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from redis.cluster import RedisCluster

from demo.chirp import app as chirp
from demo.chirp.generate import Activity, seed_events
from liveviews.changes.topic import changes_stream
from liveviews.errors import LiveviewsError
from liveviews.log.eventlog import EventLog
from liveviews.log.events import Offset, log_stream
from liveviews.store.cluster import StoreCluster
from tests.storecluster.test_pipeline import PARTITIONS, SHARDS, cluster_settings
from tests.support.checks import assert_views_consistent
from tests.support.pipeline import RunningPipeline

NOW = 1_767_225_600_000
PATIENCE_S = 20.0
FREEZE_S = 1.5
"""Shorter than the cluster's node timeout: a replica frozen longer is marked failed, and is
then no longer read from until it rejoins."""


class Writer(threading.Thread):
    """Appends Chirp's activity through the event log until stopped, one event per call with
    an idempotency key of its own, tried again with that key (as a producer whose request
    failed does) for up to ``PATIENCE_S``. Keeps each acknowledged event by its offset, and
    counts the events given up on (which may or may not be in the log)."""

    def __init__(self, client: RedisCluster, ack_replicas: int = 1) -> None:
        super().__init__(name="acknowledged-writer", daemon=True)
        self.log = EventLog(client, chirp, PARTITIONS, ack_replicas=ack_replicas)
        self.activity = Activity(users=10, seed=11)
        self.acknowledged: dict[tuple[int, str], dict[str, Any]] = {}
        self.given_up = 0
        self.halt = threading.Event()

    def run(self) -> None:
        n = 0
        while not self.halt.is_set():
            n += 1
            raw = {**next(self.activity), "time": NOW + 3_600_000 + n}  # unique, after the seed
            offset = self.append(raw, f"writer-{n}")
            if offset is None:
                self.given_up += 1
            else:
                self.acknowledged[(offset.partition, offset.id)] = raw
            time.sleep(0.005)

    def append(self, raw: dict[str, Any], key: str) -> Offset | None:
        deadline = time.monotonic() + PATIENCE_S
        while not self.halt.is_set():
            try:
                return self.log.append(raw, idempotency_key=key)
            except (LiveviewsError, redis.RedisError):
                if time.monotonic() > deadline:
                    return None
                time.sleep(0.2)
        return None

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


def replica_of(store_cluster: StoreCluster, primary: int) -> int:
    """The node that replicates ``primary``."""
    for node in store_cluster.processes:
        with store_cluster.client(node) as c:
            info: Any = c.info("replication")
        if info["role"] == "slave" and int(info["master_port"]) == store_cluster.port + primary:
            return node
    raise AssertionError(f"store cluster node {primary} has no replica")


def replication_lag(store_cluster: StoreCluster, primary: int) -> int:
    """Bytes of the replication stream ``primary`` has that its replica has not confirmed."""
    with store_cluster.client(primary) as c:
        info: Any = c.info("replication")
    return int(info["master_repl_offset"]) - int(info["slave0"]["offset"])


def wait_promoted(store_cluster: StoreCluster, replica: int, timeout: float = 30.0) -> None:
    """Until ``replica`` has taken over its dead primary's slots and the cluster serves all."""
    deadline = time.monotonic() + timeout
    while store_cluster.role(replica) != "master":
        assert time.monotonic() < deadline, f"node {replica} did not take over in {timeout} s"
        time.sleep(0.1)
    store_cluster.wait_ok(max(1.0, deadline - time.monotonic()))


@pytest.fixture()
def running(
    spark: Any, cluster_url: str, cluster_store: RedisCluster, tmp_path: Path
) -> Iterator[RunningPipeline]:
    settings = cluster_settings(cluster_url, tmp_path, LV_STORE_ACK_REPLICAS="1")
    EventLog(cluster_store, chirp, PARTITIONS).append_batch(seed_events(NOW))
    pipeline = RunningPipeline(spark, settings)
    yield pipeline
    pipeline.stop()


def test_a_primary_killed_under_load_loses_no_acknowledged_event_and_no_view_change(
    store_cluster: StoreCluster, cluster_store: RedisCluster, running: RunningPipeline
) -> None:
    killed = victim(store_cluster, cluster_store)
    replica = replica_of(store_cluster, killed)
    running.wait_until_caught_up(cluster_store, timeout=90)  # type: ignore[arg-type]
    writer = Writer(cluster_store)
    writer.start()
    try:
        time.sleep(3)
        before = len(writer.acknowledged)
        store_cluster.kill(killed)
        try:
            wait_promoted(store_cluster, replica)
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
    assert_acknowledged_once(cluster_store, writer)


def assert_acknowledged_once(client: RedisCluster, writer: Writer) -> None:
    """Every acknowledged event is in the log once, where its acknowledgement said, however
    often it was tried; and the views equal a recomputation from the log."""
    logged: dict[bytes, list[str]] = {}
    for p in range(PARTITIONS):
        for entry_id, fields in client.xrange(log_stream(p)):  # type: ignore[union-attr]
            logged.setdefault(fields[b"time"], []).append(f"{p}:{entry_id.decode()}")
    for (partition, entry_id), raw in writer.acknowledged.items():
        assert logged.get(str(raw["time"]).encode()) == [f"{partition}:{entry_id}"], raw
    assert_views_consistent(client, PARTITIONS, SHARDS)  # type: ignore[arg-type]


def test_a_replica_frozen_and_then_behind_its_primary_loses_nothing(
    store_cluster: StoreCluster, cluster_store: RedisCluster, running: RunningPipeline
) -> None:
    """The pipeline reads the log from the replicas; one is frozen (``SIGSTOP``) for a few
    seconds while events are appended to its primary, acknowledged by the primary alone, then
    thawed, when it is behind its primary until it has caught up. The pipeline's reads of it
    wait, its batches are not planned past what it can read, and its writes wait for their
    replica (``LV_STORE_ACK_REPLICAS=1``); nothing is lost or counted twice."""
    primary = victim(store_cluster, cluster_store)
    replica = replica_of(store_cluster, primary)
    running.wait_until_caught_up(cluster_store, timeout=90)  # type: ignore[arg-type]
    writer = Writer(cluster_store, ack_replicas=0)
    writer.start()
    try:
        time.sleep(2)
        before = len(writer.acknowledged)
        frozen = store_cluster.processes[replica].pid
        os.kill(frozen, signal.SIGSTOP)
        try:
            time.sleep(FREEZE_S)
            behind = replication_lag(store_cluster, primary)
        finally:
            os.kill(frozen, signal.SIGCONT)
        assert behind > 0, "the frozen replica was not behind its primary"
        store_cluster.wait_ok()
        time.sleep(3)
    finally:
        writer.stop()
    assert len(writer.acknowledged) > before > 0
    assert writer.given_up == 0
    assert store_cluster.role(replica) == "slave", "the frozen replica was failed over"
    running.wait_until_caught_up(cluster_store, timeout=90)  # type: ignore[arg-type]
    assert_acknowledged_once(cluster_store, writer)
