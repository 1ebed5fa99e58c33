"""``EventLog`` on a store cluster: a batch over partitions on several primaries, appended once
per idempotency key, each partition acknowledged by its replica when asked."""

from __future__ import annotations

from typing import Any

import pytest
from redis.cluster import RedisCluster

from liveviews.log.append import OWN_RECORD_SECONDS, IdempotencyKeyReused, record_key
from liveviews.log.eventlog import EventLog
from liveviews.log.events import log_stream
from tests.support.gateway_settings import PARTITIONS


def tasks(n: int, tag: str) -> list[dict[str, Any]]:
    return [{"type": "task_set", "payload": {"board": f"b{i}", "task": tag, "title": f"{tag}{i}"}}
            for i in range(n)]  # fmt: skip


def log_length(client: RedisCluster) -> int:
    return sum(int(client.xlen(log_stream(p))) for p in range(PARTITIONS))


def test_a_batch_over_several_primaries_is_appended_once_per_key(
    cluster_store: RedisCluster,
) -> None:
    from tests.support.queryapp import app

    log = EventLog(cluster_store, app, PARTITIONS, ack_replicas=1)
    servers = {cluster_store.get_node_from_key(log_stream(p)).name for p in range(PARTITIONS)}
    assert len(servers) >= 2
    first = log.append_batch(tasks(8, "a"), idempotency_key="batch-1")
    assert log.append_batch(tasks(8, "a"), idempotency_key="batch-1") == first
    assert {o.partition for o in first} == set(range(PARTITIONS))
    assert log_length(cluster_store) == 8
    assert log.append_batch(tasks(8, "a")) != first  # no key: a batch of its own
    assert log_length(cluster_store) == 16

    log.append_batch(tasks(1, "b"), idempotency_key="batch-2")
    with pytest.raises(IdempotencyKeyReused):
        log.append_batch(tasks(8, "c"), idempotency_key="batch-2")
    assert log_length(cluster_store) == 17
    assert cluster_store.exists(record_key(first[0].partition, "batch-1"))
    made = [
        k
        for k in cluster_store.scan_iter(
            match="{lv:log:*}:appended:*", target_nodes=RedisCluster.PRIMARIES
        )
        if b"batch-" not in k
    ]
    assert made and all(0 < cluster_store.ttl(k) <= OWN_RECORD_SECONDS for k in made)
