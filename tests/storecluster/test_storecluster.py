"""The local store cluster itself: formed, reachable through any node, one slot per hash tag."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from redis.cluster import RedisCluster

from liveviews.changes.topic import ACTIVE_KEY, FRONTIER_KEY, PROGRESS_STREAM, changes_stream
from liveviews.store.client import connect, is_cluster, node_client, queue_acknowledge
from liveviews.store.cluster import StoreCluster, free_port_range
from liveviews.store.embedded import reachable
from liveviews.store.password import embedded_url, store_password


def test_three_primaries_with_a_replica_each(
    store_cluster: StoreCluster, cluster_store: RedisCluster
) -> None:
    assert is_cluster(cluster_store)
    roles = [store_cluster.role(n) for n in range(store_cluster.nodes)]
    assert roles.count("master") == 3 and roles.count("slave") == 3


def test_keys_a_script_touches_share_a_slot(cluster_store: RedisCluster) -> None:
    slot = cluster_store.keyslot
    assert slot(FRONTIER_KEY) == slot(ACTIVE_KEY) == slot(PROGRESS_STREAM)
    assert slot(changes_stream(3)) == slot("lv:{c3}:rows:likes/t1")
    assert slot("lv:log:2") == slot("{lv:log:2}:appended:abc")


def test_a_write_is_acknowledged_by_a_replica(cluster_store: RedisCluster) -> None:
    node = node_client(cluster_store, "lv:log:0")
    with node.pipeline(transaction=False) as pipe:
        pipe.xadd("lv:log:0", {"a": "1"})
        assert queue_acknowledge(pipe, 1)
        _, replicas = pipe.execute()
    assert replicas == 1


def test_a_cluster_is_reachable_once_every_node_of_its_slot_map_answers(
    store_cluster: StoreCluster, cluster_store: RedisCluster
) -> None:
    """A program started with the cluster (Chirp's writer under ``make run-cluster``) waits
    until ``reachable``; its first key may live on any node, so the node in its URL answering
    is not enough while another one does not."""
    assert reachable(store_cluster.url)
    with store_cluster.client(1) as other:  # another primary than the URL's
        other.execute_command("CLIENT", "PAUSE", 1500, "ALL")
    paused_until = time.monotonic() + 1.5
    assert not reachable(store_cluster.url)
    time.sleep(max(0.0, paused_until - time.monotonic()) + 0.2)
    assert reachable(store_cluster.url)


def test_the_command_runs_a_cluster_until_it_is_stopped(tmp_path: Path) -> None:
    """``python -m liveviews.store.cluster``: from LV_EMBEDDED_PORT, with the data
    directory's password, serving every slot, and gone on SIGTERM."""
    port = free_port_range(12)
    env = {**os.environ, "LV_DATA_DIR": str(tmp_path), "LV_EMBEDDED_PORT": str(port)}
    env.pop("REDIS_URL", None)
    proc = subprocess.Popen([sys.executable, "-m", "liveviews.store.cluster"], env=env)
    try:
        url = embedded_url(port, store_password(tmp_path))
        deadline = time.monotonic() + 60
        while not reachable(url):
            assert proc.poll() is None and time.monotonic() < deadline, "no cluster came up"
            time.sleep(0.2)
        client = connect(url)
        assert is_cluster(client)
        client.set("k", "v")
        assert client.get("k") == b"v"
        client.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    assert not reachable(url)
