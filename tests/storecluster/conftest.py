"""A store cluster for the tests that run Liveviews on one: three primaries with a replica
each (``streaming.core.storecluster``), started once per run, flushed for every test."""

from __future__ import annotations

import random
import socket
from collections.abc import Iterator

import pytest
from redis.cluster import RedisCluster

from streaming.core.storeclient import connect
from streaming.core.storecluster import StoreCluster


def free_port_range(count: int) -> int:
    """The first of ``count`` consecutive ports on 127.0.0.1 that nothing listens on."""
    for _ in range(200):
        base = random.randrange(20_000, 40_000)
        try:
            for port in range(base, base + count):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port))
        except OSError:
            continue
        return base
    raise RuntimeError(f"no {count} free consecutive ports")


@pytest.fixture(scope="session")
def store_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StoreCluster]:
    nodes = 6
    cluster = StoreCluster(tmp_path_factory.mktemp("store-cluster"), free_port_range(2 * nodes))
    with cluster:
        yield cluster


@pytest.fixture(scope="session")
def cluster_url(store_cluster: StoreCluster) -> str:
    return store_cluster.url


@pytest.fixture()
def cluster_store(store_cluster: StoreCluster) -> Iterator[RedisCluster]:
    """A client of the cluster, every primary flushed (a test that failed a node over leaves
    the cluster with all its slots served again)."""
    store_cluster.wait_ok()
    client = connect(store_cluster.url, socket_timeout=10)
    assert isinstance(client, RedisCluster)
    client.flushall(target_nodes=RedisCluster.PRIMARIES)
    yield client
    client.close()
