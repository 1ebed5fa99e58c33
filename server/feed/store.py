"""The gateway's reads and writes of the store, with redis.asyncio.

Key names and entry formats come from ``liveviews.changes.topic``, ``liveviews.log.events`` and
``liveviews.log.eventlog``; this module only adds what the gateway reads together: the store's
epoch with a snapshot, and the stream's retention with a page of history.

A read is of parts, each in one hash slot: the control part (``lv:{m}:``: epoch, layout, the
serving versions, frontier, progress) and a change-topic shard's part (``read_cut``). On a single
server all parts are one MULTI transaction, one consistent cut. A store cluster has no
transaction across slots, so there each part is a transaction of its own, the control part
first: writers write a shard before they advance the frontier and the progress stream, so a
frontier or progress entry read before the shard is never ahead of the rows and deltas read
after it (it is a lower bound of what they reflect).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import RedisClusterException, RedisError, ResponseError

from liveviews.changes.topic import (
    ACTIVE_KEY,
    FRONTIER_KEY,
    FRONTIER_LAG_KEY,
    NO_POSITION,
    PROGRESS_STREAM,
    VIEWS_FRONTIER,
    Delta,
    changes_stream,
    decode_delta,
    physical,
    positions_key,
    rows_key,
    shard_for,
    split_physical,
    view_key,
)
from liveviews.errors import StoreMismatch
from liveviews.gateway.feed import nodes
from liveviews.gateway.wire.eventid import new_epoch, position_tuple
from liveviews.log.eventlog import META_KEY
from liveviews.pipeline.versions import composite_epoch, split_epoch
from liveviews.store.client import cluster_enabled

Client = nodes.Client
MAX_STORE_CONNECTIONS = 64
ANSWER_MARGIN_S = 5.0
"""How long past its wait a blocking read may take to answer before its connection is
presumed lost (a store busy with a long script still answers well within it)."""
STORE_ERRORS = (RedisError, OSError, RedisClusterException)
"""What a call to the store can fail with while it is away: a cluster client that cannot
learn the slots (a cluster still forming, or failing over) raises ``RedisClusterException``,
which is not a ``RedisError``."""


def end_if_cancelled() -> None:
    """Raises ``CancelledError`` if this task was asked to stop while a store call ran.

    On Python 3.11 ``asyncio.wait_for``, which redis-py's asyncio client sends each command
    through when it has a socket timeout, returns the call's result instead of raising when
    the cancel arrives as the call completes (CPython gh-86296, fixed in 3.12). A loop that
    runs until cancelled calls this each turn, or it would run on and its stop never end."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


def connect(url: str, *, blocking_ms: int | None = None) -> Client:
    """A client for requests, or (``blocking_ms``) one whose reads may wait that long for new
    entries.

    Requests share at most ``MAX_STORE_CONNECTIONS`` connections and wait for a free one, so
    a burst of subscribers queues here instead of exhausting the store's clients. On a store
    cluster the client is a cluster client with at most that many connections per server.
    A blocking read not answered ``ANSWER_MARGIN_S`` after its wait ends gives the connection
    up: after a partition, TCP's backed-off retransmissions could hold it for many seconds
    more, where a new connection answers at once.
    """
    if blocking_ms is not None:
        timeout = blocking_ms / 1000 + ANSWER_MARGIN_S
        if cluster_enabled(url):
            return RedisCluster.from_url(url, socket_timeout=timeout, socket_connect_timeout=5)
        return aioredis.Redis.from_url(url, socket_timeout=timeout, health_check_interval=30)
    if cluster_enabled(url):
        return RedisCluster.from_url(
            url,
            max_connections=MAX_STORE_CONNECTIONS,
            socket_timeout=10,
            socket_connect_timeout=5,
        )
    pool = aioredis.BlockingConnectionPool.from_url(
        url,
        max_connections=MAX_STORE_CONNECTIONS,
        timeout=10,
        socket_timeout=10,
        socket_connect_timeout=5,
    )
    return aioredis.Redis.from_pool(pool)


CONTROL_KEY = META_KEY
"""A key of the control part's hash slot (``lv:{m}:``)."""


@dataclass(frozen=True)
class Part:
    """Commands of one hash slot, queued by ``queue`` on a pipeline; ``key`` names the slot."""

    key: str
    queue: Callable[[Any], Awaitable[None]]


async def read_cut(
    client: Client, parts: Sequence[Part], *, raise_on_error: bool = True
) -> list[list[Any]]:
    """Each part's results. On a single server, every part in one MULTI (one round trip). On a
    cluster, each part in a MULTI on the server of its slot: the first part (the control part)
    before the others, which run together."""
    if not nodes.is_cluster(client):
        sizes = []
        async with client.pipeline(transaction=True) as pipe:
            for part in parts:
                before = len(pipe)
                await part.queue(pipe)
                sizes.append(len(pipe) - before)
            results = await pipe.execute(raise_on_error=raise_on_error)
        out, start = [], 0
        for size in sizes:
            out.append(results[start : start + size])
            start += size
        return out
    first = await _read_part(client, parts[0], raise_on_error)
    rest = await asyncio.gather(*(_read_part(client, p, raise_on_error) for p in parts[1:]))
    return [first, *rest]


async def _read_part(client: Client, part: Part, raise_on_error: bool) -> list[Any]:
    async def read() -> list[Any]:
        server = await nodes.node(client, part.key)
        async with server.pipeline(transaction=True) as pipe:
            await part.queue(pipe)
            return list(await pipe.execute(raise_on_error=raise_on_error))

    return await nodes.on_node(client, read)


LAYOUT_READ = """
local fields = redis.call('HMGET', KEYS[1], 'epoch', 'log_partitions', 'change_shards')
if fields[1] and fields[2] and fields[3] then
  return fields
end
redis.call('HSETNX', KEYS[1], 'epoch', ARGV[1])
redis.call('HSETNX', KEYS[1], 'log_partitions', ARGV[2])
redis.call('HSETNX', KEYS[1], 'change_shards', ARGV[3])
return redis.call('HMGET', KEYS[1], 'epoch', 'log_partitions', 'change_shards')
"""
"""The epoch and layout, recorded first if the store has none. A read, unless the record is
missing: a store that takes no writes (at its maxmemory, or refusing them before its disk fills)
refuses a transaction with a write command whole, so the reads it begins must not write when
they need not; a script without flags is refused only when it runs a write. EVAL, not
EVALSHA, because a pipeline with a registered script first asks the store whether it has it, a
round trip per read."""


@dataclass(frozen=True)
class Layout:
    """What the store must agree with: log partitions and change-topic shards."""

    partitions: int
    shards: int

    RESULTS = 1
    """How many results ``queue`` adds to a transaction's, before the caller's own."""

    def command(self) -> tuple[Any, ...]:
        """The command that reads the epoch and layout (recording them on first use)."""
        return ("EVAL", LAYOUT_READ, 1, META_KEY, new_epoch(), self.partitions, self.shards)

    def queue(self, pipe: Any) -> None:
        """Add ``command`` to a pipeline."""
        pipe.execute_command(*self.command())

    def epoch(self, results: Sequence[Any]) -> str:
        """The epoch from the results of ``queue``; refuses a store of another layout."""
        epoch, partitions, shards = results[0]
        have = (int(partitions), int(shards))
        if have != (self.partitions, self.shards):
            raise StoreMismatch(
                f"the store was created with LV_LOG_PARTITIONS={have[0]} and "
                f"LV_CHANGE_SHARDS={have[1]}; this gateway has {self.partitions} and "
                f"{self.shards}. Set them to the store's values."
            )
        return str(epoch.decode())


def decode_frontier(raw: bytes | None) -> dict[str, str]:
    return dict(orjson.loads(raw)) if raw else {}


@dataclass(frozen=True)
class Snapshot:
    """The rows of a (view, key) at a shard position, with the store's epoch and frontier.

    ``epoch`` is the store's with the version the rows are of (``versions.composite_epoch``).
    ``progress`` is the ``lv:{m}:progress`` entry the frontier came from, so a later progress frame
    is sent only if it is newer.
    """

    view: str
    key: str
    epoch: str
    rows: dict[str, Any]
    position: str
    last_change: str | None
    frontier: dict[str, str]
    progress: str
    frontier_name: str = VIEWS_FRONTIER
    """The frontier of the pipeline version the rows are of."""
    lag_ms: int | None = None
    """How far that frontier was behind the log's head at its last batch."""


async def read_snapshot(
    client: Client, layout: Layout, view: str, key: str, frontier_name: str
) -> Snapshot:
    """The rows of the version of ``view`` that serves readers. ``frontier_name`` is the
    frontier its subscribers follow as this gateway knows it (``entities@v2``); should the
    store have switched to another version since, the read is made again for that one."""
    pipeline, namespace = split_physical(frontier_name)
    for _ in range(3):
        snap, serving = await _read_snapshot(client, layout, view, key, pipeline, namespace)
        if serving == namespace:
            return snap
        namespace = serving
    raise StoreMismatch("the view's serving version kept changing while it was read.")


async def _read_snapshot(
    client: Client, layout: Layout, view: str, key: str, pipeline: str, namespace: str
) -> tuple[Snapshot, str]:
    shard = shard_for(view, key, layout.shards)
    name = physical(view, namespace)
    owned = pipeline != VIEWS_FRONTIER
    frontier_name = pipeline + namespace

    async def control(pipe: Any) -> None:
        layout.queue(pipe)
        pipe.hget(FRONTIER_KEY, frontier_name)
        pipe.xrevrange(PROGRESS_STREAM, count=1)
        pipe.hget(FRONTIER_LAG_KEY, frontier_name)
        pipe.hget(ACTIVE_KEY, pipeline)

    async def rows(pipe: Any) -> None:
        pipe.hgetall(rows_key(shard, name, key))
        pipe.hget(positions_key(shard), view_key(name, key))
        pipe.xrevrange(changes_stream(shard), count=1)

    results, shard_results = await read_cut(
        client, [Part(CONTROL_KEY, control), Part(changes_stream(shard), rows)]
    )
    frontier, progress, lag, serving = results[Layout.RESULTS :]
    found, last, head = shard_results
    snap = Snapshot(
        view=view,
        key=key,
        epoch=composite_epoch(layout.epoch(results), namespace),
        rows={r.decode(): orjson.loads(v) for r, v in found.items()},
        position=head[0][0].decode() if head else NO_POSITION,
        last_change=last.decode() if last else None,
        frontier=decode_frontier(frontier),
        progress=progress[0][0].decode() if progress else NO_POSITION,
        frontier_name=frontier_name,
        lag_ms=int(lag) if lag is not None else None,
    )
    return snap, (serving.decode() if serving is not None and owned else "")


class HistoryGone(Exception):
    """The deltas after a position are no longer all in the stream; the reason is a code."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _info(results: Any) -> dict[str, Any] | None:
    if isinstance(results, ResponseError):
        return None  # no such stream: nothing was ever written to this shard, or it was wiped
    return dict(results)


def check_retained(info: dict[str, Any] | None, after: str) -> None:
    """Raise ``HistoryGone`` unless every entry after ``after`` is still in the stream.

    ``max-deleted-entry-id`` covers XDEL only: trimming (MAXLEN) moves the first entry instead,
    so an entry after ``after`` may be gone if the stream ever lost entries and now starts
    after ``after``.
    """
    p = position_tuple(after)
    if info is None:
        if p != (0, 0):
            raise HistoryGone("history_lost", "the change topic holds nothing for this position.")
        return
    last = position_tuple(info["last-generated-id"].decode())
    if p > last:
        raise HistoryGone("unknown_position", "this position is newer than any the store made.")
    if position_tuple(info["max-deleted-entry-id"].decode()) > p:
        raise HistoryGone("history_trimmed", "deltas after this position were deleted.")
    removed = int(info["entries-added"]) > int(info["length"])
    first = position_tuple(info["recorded-first-entry-id"].decode())
    if removed and p != last and (int(info["length"]) == 0 or first > p):
        raise HistoryGone("history_trimmed", "deltas after this position were trimmed.")


@dataclass(frozen=True)
class HistoryPage:
    epoch: str
    deltas: list[Delta]
    read_to: str
    complete: bool
    progress: str


async def read_history(
    client: Client,
    layout: Layout,
    view: str,
    key: str,
    epoch: str,
    after: str,
    count: int = 1000,
    pipeline: str = VIEWS_FRONTIER,
) -> HistoryPage:
    """One page of the deltas of (view, key) after ``after`` in ``epoch`` (the store's and the
    version's, ``versions.composite_epoch``), checked gap-free; ``pipeline`` writes the view."""
    wanted_key = key.encode()
    return await read_shard_history(
        client, layout, shard_for(view, key, layout.shards), view, epoch, after, count, pipeline,
        lambda k: k == wanted_key,
    )  # fmt: skip


async def read_shard_history(
    client: Client,
    layout: Layout,
    shard: int,
    view: str,
    epoch: str,
    after: str,
    count: int,
    pipeline: str,
    wanted: Callable[[bytes], bool],
) -> HistoryPage:
    """One page of a shard's deltas of ``view`` after ``after``, of the keys ``wanted`` takes
    (as stored, in bytes), in ``epoch``, checked gap-free (``read_history``)."""
    stream = changes_stream(shard)
    start = "-" if after == NO_POSITION else f"({after}"

    async def control(pipe: Any) -> None:
        layout.queue(pipe)
        pipe.xrevrange(PROGRESS_STREAM, count=1)
        pipe.hget(ACTIVE_KEY, pipeline)

    async def page(pipe: Any) -> None:
        pipe.xinfo_stream(stream)
        pipe.xrange(stream, start, "+", count)

    results, shard_results = await read_cut(
        client, [Part(CONTROL_KEY, control), Part(stream, page)], raise_on_error=False
    )
    # XINFO of a stream never written answers an error, which ``_info`` reads as such.
    for r in [*results, shard_results[1]]:
        if isinstance(r, Exception):
            raise r
    store_epoch, namespace = split_epoch(epoch)
    if layout.epoch(results) != store_epoch:
        raise HistoryGone("epoch_changed", "the store was replaced since this id was sent.")
    progress, active = results[Layout.RESULTS :]
    serving = active.decode() if active is not None and pipeline != VIEWS_FRONTIER else ""
    if serving != namespace:
        raise HistoryGone(
            "view_replaced", "a new version of the view replaced the one this id is from."
        )
    check_retained(_info(shard_results[0]), after)
    entries = shard_results[1]
    name = physical(view, namespace).encode()
    deltas = [decode_delta(i, f) for i, f in entries if f[b"view"] == name and wanted(f[b"key"])]
    read_to = entries[-1][0].decode() if entries else after
    return HistoryPage(
        epoch,
        deltas,
        read_to,
        complete=len(entries) < count,
        progress=progress[0][0].decode() if progress else NO_POSITION,
    )
