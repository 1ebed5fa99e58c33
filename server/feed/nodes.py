"""The servers of a store cluster, for the gateway's reads that must run on one of them.

On a single server everything goes to the one client. On a cluster a MULTI, a script in a
MULTI and a blocking XREAD must go to the server that holds their keys' hash slot, and
redis-py's asyncio cluster pipeline refuses scripts and runs each command of a transaction in a
thread of its own. So the gateway keeps a plain client of each primary, made with the cluster
client's own connection settings, and a map of which primary serves each slot, and sends those
reads and writes there (``node``). A read that meets a failover (a server gone, ``MOVED``,
``CLUSTERDOWN``) learns the slots again and retries for a while (``on_node``) before it
answers unavailable.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import time
import weakref
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster
from redis.crc import key_slot
from redis.exceptions import ClusterDownError
from redis.exceptions import ConnectionError as StoreConnectionError

from liveviews.store.client import FAILOVER_ERRORS, FAILOVER_SECONDS, SLOTS

Client = aioredis.Redis | RedisCluster
T = TypeVar("T")


class Servers:
    """A plain client of each primary of a cluster, and which primary serves each hash slot.

    The slot map is read with ``CLUSTER SLOTS`` from any server that answers, and read again by
    ``refresh`` after a failover; it is kept apart from the cluster client's, whose own
    recovery is tied to the commands it sends itself.
    """

    def __init__(self, options: dict[str, Any]) -> None:
        self.options = options
        self.clients: dict[str, aioredis.Redis] = {}
        self.starts: list[int] = []
        self.owners: list[str] = []

    def client(self, host: str, port: int) -> aioredis.Redis:
        name = f"{host}:{port}"
        server = self.clients.get(name)
        if server is None:
            pool = aioredis.ConnectionPool(host=host, port=port, **self.options)
            server = self.clients[name] = aioredis.Redis(connection_pool=pool)
        return server

    def of(self, key: str) -> aioredis.Redis:
        at = bisect.bisect_right(self.starts, key_slot(key.encode())) - 1
        host, _, port = self.owners[at].rpartition(":")
        return self.client(host, int(port))

    async def load(self, candidates: list[tuple[str, int]]) -> None:
        """The slot map as the first of ``candidates`` (then the known servers) that answers
        says; raises the last failure if none does."""
        failure: BaseException = StoreConnectionError("no server of the store cluster is known")
        known = [tuple(n.rsplit(":", 1)) for n in self.clients]
        for host, port in [*candidates, *((h, int(p)) for h, p in known)]:
            try:
                ranges: Any = await self.client(host, port).execute_command("CLUSTER SLOTS")
            except (*FAILOVER_ERRORS, OSError) as exc:
                failure = exc
                continue
            if sum(int(r[1]) - int(r[0]) + 1 for r in ranges) < SLOTS:
                # A cluster still forming, or one that lost a primary: keys of the missing
                # slots are refused anyway, and a map with holes would send them elsewhere.
                failure = ClusterDownError("the store cluster does not serve every slot yet")
                continue
            ranges = sorted((int(r[0]), _name(r[2])) for r in ranges)
            self.starts = [start for start, _ in ranges]
            self.owners = [owner for _, owner in ranges]
            return
        raise failure


def _name(node: list[Any]) -> str:
    host = node[0].decode() if isinstance(node[0], bytes) else str(node[0])
    return f"{host}:{int(node[1])}"


_servers: weakref.WeakKeyDictionary[RedisCluster, Servers] = weakref.WeakKeyDictionary()


def is_cluster(client: Any) -> bool:
    return isinstance(client, RedisCluster)


async def _servers_of(client: RedisCluster) -> Servers:
    servers = _servers.get(client)
    if servers is None:
        await client.initialize()
        some = next(iter(client.nodes_manager.nodes_cache.values()))
        # The cluster client's connection settings, less its own hook for slot moves.
        options = {k: v for k, v in some.connection_kwargs.items()
                   if k not in ("host", "port") and not k.startswith("oss_")}  # fmt: skip
        options["max_connections"] = some.max_connections
        servers = Servers(options)
        nodes = [(n.host, int(n.port)) for n in client.nodes_manager.nodes_cache.values()]
        await servers.load(nodes)
        servers = _servers.setdefault(client, servers)
    return servers


async def node(client: Client, key: str) -> aioredis.Redis:
    """A plain client of the server that holds ``key`` (``client`` itself on a single server)."""
    if not isinstance(client, RedisCluster):
        return client
    return (await _servers_of(client)).of(key)


async def by_node(client: Client, keys: list[str]) -> list[tuple[aioredis.Redis, list[int]]]:
    """``keys`` grouped by the server that holds them: each server with the indexes of its keys."""
    groups: dict[int, tuple[aioredis.Redis, list[int]]] = {}
    for i, key in enumerate(keys):
        server = await node(client, key)
        groups.setdefault(id(server), (server, []))[1].append(i)
    return list(groups.values())


async def refresh(client: Client) -> None:
    """Learn the cluster's slots again, after a failover moved some to another server."""
    if not isinstance(client, RedisCluster):
        return
    servers = _servers.get(client)
    if servers is not None:
        await servers.load([])
    with contextlib.suppress(Exception):  # the cluster client's own map, for its own commands
        await client.nodes_manager.initialize()


async def on_node(
    client: Client, call: Callable[[], Awaitable[T]], budget: float = FAILOVER_SECONDS
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
        servers = _servers.pop(client, None)
        for server in servers.clients.values() if servers is not None else ():
            await server.aclose()
    await client.aclose()
