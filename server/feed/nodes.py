"""The servers of a store cluster, for the gateway's reads that must run on one of them.

On a single server everything goes to the one client. On a cluster a MULTI, a script in a
MULTI and a blocking XREAD must go to the server that holds their keys' hash slot, and
redis-py's asyncio cluster pipeline refuses scripts and runs each command of a transaction in a
thread of its own. So the gateway keeps a plain client of each primary, made from the cluster
client's own connection settings, and sends those reads there (``node``); the cluster client
keeps the slot map. A read that meets a failover (a server gone, ``MOVED``, ``CLUSTERDOWN``)
learns the slots again and retries for a while (``on_node``) before it answers unavailable.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import weakref
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import (
    AskError,
    ClusterDownError,
    MovedError,
    ReadOnlyError,
    TryAgainError,
)
from redis.exceptions import (
    ConnectionError as StoreConnectionError,
)
from redis.exceptions import (
    TimeoutError as StoreTimeoutError,
)

Client = aioredis.Redis | RedisCluster
T = TypeVar("T")

FAILOVER_ERRORS = (
    StoreConnectionError, StoreTimeoutError, MovedError, AskError, ClusterDownError,
    TryAgainError, ReadOnlyError, ConnectionRefusedError,
)  # fmt: skip
"""What a cluster client sees while a primary fails over to its replica (~2-4 s)."""
RETRY_SECONDS = 10.0
"""How long a read on one server retries through a failover before it gives up."""

_servers: weakref.WeakKeyDictionary[RedisCluster, dict[str, aioredis.Redis]] = (
    weakref.WeakKeyDictionary()
)


def is_cluster(client: Any) -> bool:
    return isinstance(client, RedisCluster)


async def node(client: Client, key: str) -> aioredis.Redis:
    """A plain client of the server that holds ``key`` (``client`` itself on a single server)."""
    if not isinstance(client, RedisCluster):
        return client
    await client.initialize()
    where = client.get_node_from_key(key)
    assert where is not None
    servers = _servers.setdefault(client, {})
    server = servers.get(where.name)
    if server is None:
        # The cluster's own hook for its slot moves is left out: this client is of one server.
        options = {k: v for k, v in where.connection_kwargs.items() if not k.startswith("oss_")}
        pool = aioredis.ConnectionPool(
            connection_class=where.connection_class,
            max_connections=where.max_connections,
            **options,
        )
        server = servers[where.name] = aioredis.Redis(connection_pool=pool)
    return server


async def by_node(client: Client, keys: list[str]) -> list[tuple[aioredis.Redis, list[int]]]:
    """``keys`` grouped by the server that holds them: each server with the indexes of its keys."""
    groups: dict[int, tuple[aioredis.Redis, list[int]]] = {}
    for i, key in enumerate(keys):
        server = await node(client, key)
        groups.setdefault(id(server), (server, []))[1].append(i)
    return list(groups.values())


async def refresh(client: Client) -> None:
    """Learn the cluster's slots again, after a failover moved some to another server."""
    if isinstance(client, RedisCluster):
        await client.nodes_manager.initialize()


async def on_node(
    client: Client, call: Callable[[], Awaitable[T]], budget: float = RETRY_SECONDS
) -> T:
    """``await call()``; on a cluster, through a failover: again after learning the slots, with
    a growing pause, for up to ``budget`` seconds. ``call`` must be safe to repeat (a read)."""
    if not isinstance(client, RedisCluster):
        return await call()
    deadline = time.monotonic() + budget
    pause = 0.1
    while True:
        try:
            return await call()
        except FAILOVER_ERRORS:
            if time.monotonic() + pause > deadline:
                raise
        await asyncio.sleep(pause)
        pause = min(pause * 2, 1.0)
        with contextlib.suppress(*FAILOVER_ERRORS):  # still failing over: the next try says so
            await refresh(client)


async def close(client: Client) -> None:
    """Close ``client`` and, on a cluster, the clients of its servers."""
    if isinstance(client, RedisCluster):
        for server in _servers.pop(client, {}).values():
            await server.aclose()
    await client.aclose()
