"""The gateway's reads of a query-shaped subscription: the keys of a view with a prefix, and a
window of a key's rows in score order (docs/PROTOCOL.md, section 5.1).

Each read is one store transaction, like a key's snapshot: a prefix's keys over every shard
(one script per shard, each reading the shard's key index, its rows and its position), or one
key's window. The frontier is read in the same transaction, so it never covers a delta the
rows do not hold. On a store cluster the frontier is read first and each shard's script is a
transaction of its own (``store.read_cut``): each shard's rows are consistent with its
position, and the frontier, read before them, never covers a delta they do not hold.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from liveviews.changes.topic import (
    ACTIVE_KEY,
    FRONTIER_KEY,
    FRONTIER_LAG_KEY,
    NO_POSITION,
    PROGRESS_STREAM,
    VIEWS_FRONTIER,
    changes_stream,
    index_key,
    physical,
    rank_key,
    rows_key,
    shard_for,
    split_physical,
)
from liveviews.errors import StoreMismatch
from liveviews.gateway.feed.store import (
    CONTROL_KEY,
    Client,
    Layout,
    Part,
    decode_frontier,
    read_cut,
)
from liveviews.pipeline.versions import composite_epoch

PREFIX_SNAPSHOT = """
-- KEYS[1] a view's key index in one shard, KEYS[2] the shard's change stream.
-- ARGV[1] the view's rows key prefix in that shard, ARGV[2] and ARGV[3] the range of keys.
local out = {}
for _, key in ipairs(redis.call('ZRANGEBYLEX', KEYS[1], ARGV[2], ARGV[3])) do
  out[#out + 1] = key
  out[#out + 1] = redis.call('HGETALL', ARGV[1] .. key)
end
local head = redis.call('XREVRANGE', KEYS[2], '+', '-', 'COUNT', 1)[1]
return {head and head[1] or '0-0', out}
"""

WINDOW = """
-- KEYS[1] a key's rank (row -> score), KEYS[2] its rows, KEYS[3] its shard's change stream.
-- ARGV[1] the view's limit (the rows served), ARGV[2] the window's limit,
-- ARGV[3] '1' when the window starts after the row ARGV[5] of score ARGV[4],
-- ARGV[6] also list the rows after the window: '0' none, '1' down to the row ARGV[8] of score
-- ARGV[7], '2' all.
-- Returns the stream's last entry id, the window (row, score, value, ...) and the rows listed
-- after it (row, score, ...). Rows are in score order, ties by row id in byte order, as the
-- rank's own order; strings are compared byte by byte, never by the server's locale.
local function less(a, b)
  local n = math.min(#a, #b)
  for i = 1, n do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then
      return x < y
    end
  end
  return #a < #b
end
local function after(score, row, s, r)  -- does (score, row) come after (s, r)?
  return score < s or (score == s and less(row, r))
end
local top = redis.call('ZREVRANGE', KEYS[1], 0, tonumber(ARGV[1]) - 1, 'WITHSCORES')
local n, starts, lists = tonumber(ARGV[2]), ARGV[3] == '1', ARGV[6]
local s0, r0 = tonumber(ARGV[4]), ARGV[5]
local s1, r1 = tonumber(ARGV[7]), ARGV[8]
local ids, scores, beyond = {}, {}, {}
for i = 1, #top, 2 do
  local row, score = top[i], tonumber(top[i + 1])
  if not starts or after(score, row, s0, r0) then
    if #ids < n then
      ids[#ids + 1] = row
      scores[#scores + 1] = top[i + 1]
    elseif lists == '2' or (lists == '1' and not after(score, row, s1, r1)) then
      beyond[#beyond + 1] = row
      beyond[#beyond + 1] = top[i + 1]
    else
      break
    end
  end
end
local window = {}
if #ids > 0 then
  local values = redis.call('HMGET', KEYS[2], unpack(ids))
  for i, row in ipairs(ids) do
    window[#window + 1] = row
    window[#window + 1] = scores[i]
    window[#window + 1] = values[i] or 'null'
  end
end
local head = redis.call('XREVRANGE', KEYS[3], '+', '-', 'COUNT', 1)[1]
return {head and head[1] or '0-0', window, beyond}
"""


@dataclass(frozen=True)
class Around:
    """What a read says about the rows: the store's epoch with the version, the frontier, and
    the ``lv:{m}:progress`` entry it came from."""

    epoch: str
    frontier: dict[str, str]
    progress: str
    frontier_name: str
    lag_ms: int | None


@dataclass(frozen=True)
class PrefixSnapshot:
    around: Around
    keys: dict[str, dict[str, Any]]
    positions: list[str]
    """Per change-topic shard, the entry id the rows are at."""


Rank = tuple[float, str]
"""A row's place in a key's order: its score and its id (``WindowRead``)."""


@dataclass(frozen=True)
class WindowRow:
    row: str
    score: float
    value: bytes
    """The row's value as stored (JSON), to compare with what was sent."""


@dataclass(frozen=True)
class WindowRead:
    around: Around
    rows: list[WindowRow]
    """The window, in order."""
    position: str
    beyond: list[Rank] = field(default_factory=list)
    """Rows after the window, as far as the read was asked to list them."""


class Reads:
    """The scripts, registered once per process."""

    def __init__(self, client: Client) -> None:
        self.prefix = client.register_script(PREFIX_SNAPSHOT)
        self.window = client.register_script(WINDOW)


def _around(layout: Layout, results: list[Any], pipeline: str, namespace: str) -> Around:
    """What the control part (``_control``) read."""
    frontier, progress, lag = results[Layout.RESULTS : Layout.RESULTS + 3]
    return Around(
        epoch=composite_epoch(layout.epoch(results), namespace),
        frontier=decode_frontier(frontier),
        progress=progress[0][0].decode() if progress else NO_POSITION,
        frontier_name=pipeline + namespace,
        lag_ms=int(lag) if lag is not None else None,
    )


def _control(layout: Layout, pipeline: str, namespace: str) -> Part:
    """The read of the epoch, the frontier of ``pipeline``'s version and its serving version."""

    async def queue(pipe: Any) -> None:
        layout.queue(pipe)
        pipe.hget(FRONTIER_KEY, pipeline + namespace)
        pipe.xrevrange(PROGRESS_STREAM, count=1)
        pipe.hget(FRONTIER_LAG_KEY, pipeline + namespace)
        pipe.hget(ACTIVE_KEY, pipeline)

    return Part(CONTROL_KEY, queue)


def _serving(results: list[Any], pipeline: str) -> str:
    serving = results[Layout.RESULTS + 3]
    return serving.decode() if serving is not None and pipeline != VIEWS_FRONTIER else ""


def _prefix_of(reads: Reads, shard: int, name: str, low: bytes, high: bytes) -> Part:
    """The read of a shard's keys of view ``name`` between ``low`` and ``high``, with their rows
    and the shard's position."""

    async def queue(pipe: Any) -> None:
        await reads.prefix(
            keys=[index_key(shard, name), changes_stream(shard)],
            args=[rows_key(shard, name, ""), low, high],
            client=pipe,
        )

    return Part(changes_stream(shard), queue)


def _window_of(reads: Reads, keys: list[str], args: list[Any]) -> Part:
    """The read of a key's window (``WINDOW``), in its shard."""

    async def queue(pipe: Any) -> None:
        await reads.window(keys=keys, args=args, client=pipe)

    return Part(keys[2], queue)


def key_range(prefix: str) -> tuple[bytes, bytes]:
    """The ZRANGEBYLEX bounds of the keys that start with ``prefix``: no UTF-8 string has the
    byte 0xff, so every such key sorts before ``prefix`` + 0xff."""
    if not prefix:
        return b"-", b"+"
    raw = prefix.encode()
    return b"[" + raw, b"[" + raw + b"\xff"


async def read_prefix(
    client: Client, reads: Reads, layout: Layout, view: str, prefix: str, frontier_name: str
) -> PrefixSnapshot:
    """The rows of every key of ``view`` that starts with ``prefix``, in one transaction over
    every shard (on a cluster, one per shard, each with its position), of the version that
    serves readers (read again should it have changed since ``frontier_name`` was known, as
    ``read_snapshot`` does)."""
    pipeline, namespace = split_physical(frontier_name)
    low, high = key_range(prefix)
    for _ in range(3):
        name = physical(view, namespace)
        parts = [_control(layout, pipeline, namespace)]
        for shard in range(layout.shards):
            parts.append(_prefix_of(reads, shard, name, low, high))
        results, *shards = await read_cut(client, parts)
        serving = _serving(results, pipeline)
        if serving != namespace:
            namespace = serving
            continue
        keys: dict[str, dict[str, Any]] = {}
        positions = []
        for ((head, found),) in shards:
            positions.append(head.decode())
            for i in range(0, len(found), 2):
                flat = found[i + 1]
                rows = {flat[j].decode(): orjson.loads(flat[j + 1]) for j in range(0, len(flat), 2)}
                if rows:
                    keys[found[i].decode()] = rows
        return PrefixSnapshot(_around(layout, results, pipeline, namespace), keys, positions)
    raise StoreMismatch("the view's serving version kept changing while it was read.")


async def read_window(
    client: Client,
    reads: Reads,
    layout: Layout,
    view: str,
    key: str,
    frontier_name: str,
    *,
    view_limit: int,
    limit: int,
    after: Rank | None,
    until: Rank | None | bool = False,
) -> WindowRead:
    """The ``limit`` rows of ``key`` that come first in score order (after the row ``after``,
    if given), of the version that serves readers. ``until`` also lists the rows after the
    window: down to that row, or (True) all of them."""
    pipeline, namespace = split_physical(frontier_name)
    shard = shard_for(view, key, layout.shards)
    args: list[Any] = [view_limit, limit]
    args += ["1", repr(after[0]), after[1]] if after else ["0", "0", ""]
    if until is True:
        args += ["2", "0", ""]
    elif until:
        args += ["1", repr(until[0]), until[1]]
    else:
        args += ["0", "0", ""]
    for _ in range(3):
        name = physical(view, namespace)
        keys = [rank_key(shard, name, key), rows_key(shard, name, key), changes_stream(shard)]
        results, ((head, window_rows, beyond),) = await read_cut(
            client, [_control(layout, pipeline, namespace), _window_of(reads, keys, args)]
        )
        serving = _serving(results, pipeline)
        if serving != namespace:
            namespace = serving
            continue
        rows = [
            WindowRow(window_rows[i].decode(), float(window_rows[i + 1]), window_rows[i + 2])
            for i in range(0, len(window_rows), 3)
        ]
        ranks = [(float(beyond[i + 1]), beyond[i].decode()) for i in range(0, len(beyond), 2)]
        return WindowRead(_around(layout, results, pipeline, namespace), rows, head.decode(),
                          ranks)  # fmt: skip
    raise StoreMismatch("the view's serving version kept changing while it was read.")
