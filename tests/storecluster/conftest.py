"""A store cluster for the tests that run Liveviews on one: three primaries with a replica
each (``liveviews.store.cluster``), started once per run, flushed for every test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from redis.cluster import RedisCluster

from liveviews.store.client import connect
from liveviews.store.cluster import StoreCluster, free_port_range


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
