"""The gateway's reads and writes of the store, with redis.asyncio.

Key names and entry formats come from ``streaming.core.changes``, ``streaming.core.events`` and
``streaming.core.log``; this module only adds what the gateway reads together in one transaction:
the store's epoch with a snapshot, and the stream's retention with a page of history.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from server.wire.eventid import new_epoch, position_tuple
from streaming.core.changes import (
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
from streaming.core.errors import StoreMismatch
from streaming.core.events import Event, Offset
from streaming.core.log import META_KEY, Retention, offsets_from, placements, queue_appends
from streaming.core.versions import composite_epoch, split_epoch

Client = aioredis.Redis
MAX_STORE_CONNECTIONS = 64


def connect(url: str, *, blocking: bool = False) -> Client:
    """A client for requests, or (``blocking``) one whose reads may wait for new entries.

    Requests share at most ``MAX_STORE_CONNECTIONS`` connections and wait for a free one, so
    a burst of subscribers queues here instead of exhausting the store's clients.
    """
    if blocking:
        return aioredis.Redis.from_url(url, socket_timeout=None, health_check_interval=30)
    pool = aioredis.BlockingConnectionPool.from_url(
        url,
        max_connections=MAX_STORE_CONNECTIONS,
        timeout=10,
        socket_timeout=10,
        socket_connect_timeout=5,
    )
    return aioredis.Redis.from_pool(pool)


@dataclass(frozen=True)
class Layout:
    """What the store must agree with: log partitions and change-topic shards."""

    partitions: int
    shards: int

    def queue(self, pipe: Any) -> None:
        """Add the four commands that record the epoch and layout on first use, then read them."""
        pipe.hsetnx(META_KEY, "epoch", new_epoch())
        pipe.hsetnx(META_KEY, "log_partitions", self.partitions)
        pipe.hsetnx(META_KEY, "change_shards", self.shards)
        pipe.hmget(META_KEY, ["epoch", "log_partitions", "change_shards"])

    def epoch(self, results: Sequence[Any]) -> str:
        """The epoch from the four results of ``queue``; refuses a store of another layout."""
        epoch, partitions, shards = results[3]
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
    async with client.pipeline(transaction=True) as pipe:
        layout.queue(pipe)
        pipe.hgetall(rows_key(shard, name, key))
        pipe.hget(positions_key(shard), view_key(name, key))
        pipe.xrevrange(changes_stream(shard), count=1)
        pipe.hget(FRONTIER_KEY, frontier_name)
        pipe.xrevrange(PROGRESS_STREAM, count=1)
        pipe.hget(FRONTIER_LAG_KEY, frontier_name)
        pipe.hget(ACTIVE_KEY, pipeline)
        results = await pipe.execute()
    rows, last, head, frontier, progress, lag, serving = results[4:]
    snap = Snapshot(
        view=view,
        key=key,
        epoch=composite_epoch(layout.epoch(results), namespace),
        rows={r.decode(): orjson.loads(v) for r, v in rows.items()},
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
    async with client.pipeline(transaction=True) as pipe:
        layout.queue(pipe)
        pipe.xinfo_stream(stream)
        pipe.xrange(stream, start, "+", count)
        pipe.xrevrange(PROGRESS_STREAM, count=1)
        pipe.hget(ACTIVE_KEY, pipeline)
        results = await pipe.execute(raise_on_error=False)
    for r in results[:4] + results[5:]:
        if isinstance(r, Exception):
            raise r
    store_epoch, namespace = split_epoch(epoch)
    if layout.epoch(results) != store_epoch:
        raise HistoryGone("epoch_changed", "the store was replaced since this id was sent.")
    serving = results[7].decode() if results[7] is not None and pipeline != VIEWS_FRONTIER else ""
    if serving != namespace:
        raise HistoryGone(
            "view_replaced", "a new version of the view replaced the one this id is from."
        )
    check_retained(_info(results[4]), after)
    entries, progress = results[5], results[6]
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


async def append(
    client: Client, events: Sequence[Event], partitions: int, retention: Retention | None = None
) -> list[Offset]:
    """Append a validated batch in one MULTI/EXEC: every event or none."""
    if not events:
        return []
    placed = placements(events, partitions)
    async with client.pipeline(transaction=True) as pipe:
        queue_appends(pipe, placed, retention)
        ids = await pipe.execute()
    return offsets_from([s for s, _ in placed], ids)
