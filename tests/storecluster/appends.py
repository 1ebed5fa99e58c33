"""Events into the log of a store cluster, partition by partition, for the pipeline tests.

Each event goes to its partition's stream (``streaming.core.events``: the same placement and
fields as ``EventLog``), on the primary that holds it: a transaction over several partitions
would span slots of the cluster.
"""

from __future__ import annotations

import contextlib
from typing import Any

import redis
from redis.cluster import RedisCluster

from streaming.core.app import App
from streaming.core.events import log_stream, partition_for
from streaming.core.storeclient import check_acknowledged, node_client, queue_acknowledge, refresh


def append(client: RedisCluster, app: App, partitions: int, raws: list[dict[str, Any]]) -> None:
    """``raws``, validated, in order within each partition."""
    with client.pipeline(transaction=False) as pipe:
        for event in app.validate_batch(raws):
            pipe.xadd(log_stream(partition_for(event.key, partitions)), event.encode())
        pipe.execute()


def append_acknowledged(
    client: RedisCluster, app: App, partitions: int, raw: dict[str, Any], replicas: int
) -> str | None:
    """One event, acknowledged only once ``replicas`` replicas have it (``WAIT`` on the
    connection that wrote it): its entry id, or None when the write failed or was not
    confirmed (then it may or may not be in the log, as for a client whose request failed).
    Never retried here, so an event is never appended twice."""
    (event,) = app.validate_batch([raw])
    stream = log_stream(partition_for(event.key, partitions))
    try:
        with node_client(client, stream).pipeline(transaction=False) as pipe:
            pipe.xadd(stream, event.encode())
            queue_acknowledge(pipe, replicas)
            entry_id, got = pipe.execute()
        check_acknowledged(got, replicas)
    except (redis.RedisError, OSError):  # refused, moved, failing over, not confirmed
        with contextlib.suppress(redis.RedisError, OSError):
            refresh(client)  # the cluster may not serve every slot yet: the next try asks
        return None
    return str(entry_id.decode())
