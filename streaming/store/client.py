"""Clients of the store: one Redis or Valkey server, or a Redis Cluster / Valkey cluster.

``REDIS_URL`` names either a single server or any node of a cluster; ``connect`` asks the
server which (``INFO cluster``) and returns a ``redis.Redis`` or a ``redis.RedisCluster``.
Code that needs to know (a transaction across slots is refused by a cluster) asks
``is_cluster``. The key layout (``liveviews.changes.topic``) keeps every key a script or a
transaction touches together in one hash slot, so the same scripts run on both.

With ``LV_STORE_ACK_REPLICAS=N``, a writer sends ``WAIT N`` after its writes, on the same
connection of the server that took them (``node_client``, ``queue_acknowledge``): an event is
acknowledged, or a micro-batch committed, only once N replicas have it, so a primary that
fails over to its replica loses nothing acknowledged (docs/SCALING.md, "Store cluster").
"""

from __future__ import annotations

import contextlib
import functools
import logging
import time
from collections.abc import Callable
from typing import Any, TypeVar

import redis
from redis.cluster import LoadBalancingStrategy, RedisCluster
from redis.exceptions import (
    AskError,
    ClusterError,
    ReadOnlyError,
    RedisClusterException,
    TryAgainError,
)

from liveviews.errors import ConfigurationError

Client = redis.Redis | RedisCluster
T = TypeVar("T")
log = logging.getLogger("liveviews.store")

FAILOVER_ERRORS = (
    redis.ConnectionError, redis.TimeoutError, ConnectionRefusedError,
    ClusterError,  # CLUSTERDOWN
    AskError,  # MOVED too
    TryAgainError, ReadOnlyError,
    RedisClusterException,  # "slots not covered" while the cluster fails over
)  # fmt: skip
"""What a client sees while a store restarts or a primary fails over to its replica (2-4 s
with the local cluster's node timeout, 15-20 s with a deployment's default): refused
connections, then ``MOVED`` and ``CLUSTERDOWN`` until every node has learnt the new primary.
redis-py's own retries cover a single command; a pipeline fails at the first of these, and
what is safe to repeat is tried again (``retrying``)."""
SLOTS = 16384
"""The hash slots a store cluster divides its keys among."""
FAILOVER_SECONDS = 10.0
"""How long a call on one server (an append, a gateway's read) is tried again."""
OUTAGE_SECONDS = 30.0
"""How long the pipeline's reads and writes are tried again before a micro-batch fails."""
ACK_TIMEOUT_MS = 5000
"""How long a write waits for its replicas before the writer is told it may not be durable."""


WRITES_REFUSED = ("NOREPLICAS", "MISCONF")
"""How a store answers a write it refuses for a time, besides ``OutOfMemoryError`` at its
``maxmemory``: its disk guard is on (``NOREPLICAS``, ``liveviews.store.diskguard``) or it could
not write its append-only file (``MISCONF``). A script is refused at its first write, and the
guard cannot turn on within one, so a refused script wrote nothing."""


def refused_for_now(exc: BaseException) -> bool:
    """Is ``exc`` a store refusing writes for a time? redis-py raises ``OOM`` as
    ``OutOfMemoryError`` (without the code); the others are plain ``ResponseError``s, whose
    text a pipeline prefixes ("Command # 1 (EVALSHA ...) of pipeline caused error: NOREPLICAS")."""
    if isinstance(exc, redis.exceptions.OutOfMemoryError):
        return True
    text = str(exc)
    return any(text.startswith(c) or f"caused error: {c} " in text for c in WRITES_REFUSED)


class NotReplicated(redis.RedisError):
    """Fewer replicas than ``LV_STORE_ACK_REPLICAS`` confirmed a write in time."""


def retrying(
    command: Callable[[], T],
    client: Client,
    what: str,
    *,
    seconds: float = OUTAGE_SECONDS,
    errors: tuple[type[BaseException], ...] = (*FAILOVER_ERRORS, NotReplicated),
    refusals: bool = False,
) -> T:
    """``command()`` until it succeeds, for about ``seconds``, learning the cluster's slots
    again after each of ``errors`` (and, with ``refusals``, while the store refuses writes for
    a time: ``WRITES_REFUSED``); then that error is raised. ``command`` must be safe to repeat
    (a read, or a write that is idempotent: a micro-batch by its id, an append by its
    idempotency key)."""
    deadline = time.monotonic() + seconds
    delay = 0.05
    caught: tuple[type[BaseException], ...] = (*errors, redis.ResponseError)
    while True:
        try:
            return command()
        except caught as exc:
            again = isinstance(exc, errors) or (refusals and refused_for_now(exc))
            if not again or time.monotonic() + delay > deadline:
                raise
            log.warning("%s: %s; trying again in %.2f s", what, exc, delay)
            time.sleep(delay)
            delay = min(2.0, delay * 2)
            with contextlib.suppress(redis.RedisError, RedisClusterException, OSError):
                refresh(client)  # a cluster that does not serve every slot yet: next time


@functools.cache
def cluster_enabled(url: str) -> bool:
    """Does the server at ``url`` run in cluster mode? Asked once per URL and process."""
    probe = redis.Redis.from_url(url, socket_connect_timeout=5, socket_timeout=5)
    try:
        info: Any = probe.info("cluster")
        return bool(int(info.get("cluster_enabled", 0)))
    finally:
        probe.close()


def connect(url: str, *, replica_reads: bool = False, **options: Any) -> Client:
    """A client of the store at ``url``: a cluster client when the server is a cluster node.

    ``options`` are redis-py's connection options (``socket_timeout``, ``retry``, ...). With
    ``replica_reads``, a cluster client reads from the primaries' replicas (a primary itself
    when it has none): what a replica holds survives its primary failing over to it, which an
    entry read from the primary before it was copied need not.
    """
    if not cluster_enabled(url):
        return redis.Redis.from_url(url, **options)
    if _database(url):
        raise ConfigurationError(
            f"a store cluster has only database 0; remove '/{_database(url)}' from REDIS_URL."
        )
    options.pop("health_check_interval", None)
    if replica_reads:
        options["load_balancing_strategy"] = LoadBalancingStrategy.ROUND_ROBIN_REPLICAS
    return RedisCluster.from_url(url, **options)


_replicas_asked: dict[int, float] = {}


def learn_replicas(client: Client, every: float = 10.0) -> None:
    """A cluster client that reads from replicas and knows a primary without one reads the
    slot map again, at most once per ``every`` seconds: a cluster lists a replica only once it
    has synced, so a client started with the cluster would read from the primaries for good."""
    if not isinstance(client, RedisCluster) or client.load_balancing_strategy is None:
        return
    types = [n.server_type for n in client.nodes_manager.nodes_cache.values()]
    if types.count("replica") >= types.count("primary"):
        return
    now = time.monotonic()
    if now - _replicas_asked.get(id(client), 0.0) < every:
        return
    _replicas_asked[id(client)] = now
    with contextlib.suppress(redis.RedisError, RedisClusterException, OSError):
        refresh(client)  # the cluster away: the reads themselves say so


def is_cluster(client: Any) -> bool:
    """Is ``client`` (sync or asyncio, or one of their pipelines) a cluster client?"""
    from redis.asyncio.cluster import ClusterPipeline as AsyncClusterPipeline
    from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
    from redis.cluster import ClusterPipeline

    return isinstance(client, RedisCluster | ClusterPipeline | AsyncRedisCluster
                      | AsyncClusterPipeline)  # fmt: skip


def node_client(client: Client, key: str) -> redis.Redis:
    """A client of the one server that holds ``key`` (``client`` itself on a single server).

    A write and the ``WAIT`` after it must go on one connection (``WAIT`` counts that
    connection's writes), which a cluster client does not promise: a pipeline of this client
    does. After a failover, refresh the slots with ``refresh(client)`` and ask again.
    """
    if not isinstance(client, RedisCluster):
        return client
    node = client.get_node_from_key(key)
    assert node is not None and node.redis_connection is not None
    return node.redis_connection


def refresh(client: Client) -> None:
    """Learn the cluster's slots again (after a MOVED reply or a node that stopped answering)."""
    if isinstance(client, RedisCluster):
        client.nodes_manager.initialize()


def queue_acknowledge(pipe: Any, replicas: int, timeout_ms: int = ACK_TIMEOUT_MS) -> bool:
    """Queue ``WAIT`` on a pipeline of one server after its writes; False if not asked for."""
    if replicas <= 0:
        return False
    pipe.execute_command("WAIT", replicas, timeout_ms)
    return True


def check_acknowledged(got: Any, replicas: int, where: str = "the store") -> None:
    """Raise ``NotReplicated`` if ``WAIT`` answered fewer than ``replicas``."""
    if int(got) < replicas:
        raise NotReplicated(
            f"{got} of {replicas} replicas of {where} confirmed a write within "
            f"{ACK_TIMEOUT_MS} ms (LV_STORE_ACK_REPLICAS)"
        )


def _database(url: str) -> str:
    from urllib.parse import urlsplit

    path = urlsplit(url).path.strip("/")
    return "" if path in ("", "0") else path
