"""The one sink of every view: each micro-batch's row changes become state and deltas.

``ChangeTopicSink`` is the ``foreachBatch`` function of the pipeline query; it runs on the
driver. Lua calls (``sink.lua``) apply the batch's row changes shard by shard, each call
atomically for every (view, key) it holds: new rows, one delta per changed key, its position.
A large batch takes several bounded calls, so the store keeps serving readers in between; the
last call of a shard records the batch id, and the frontier (``frontier.lua``) advances only
after every shard has the batch, so a reader that sees the frontier sees all its changes.
A batch replayed after a crash changes nothing it had already changed: its shards find the
batch id recorded, or re-apply values already stored, which appends no delta.
"""

from __future__ import annotations

import functools
import logging
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

import orjson
import redis
from pyspark.sql import DataFrame
from redis.cluster import RedisCluster

from liveviews.app import App
from liveviews.changes.topic import (
    ACTIVE_KEY,
    FRONTIER_BATCHES_KEY,
    FRONTIER_KEY,
    FRONTIER_LAG_KEY,
    PROGRESS_STREAM,
    VIEWS_FRONTIER,
    batches_key,
    candidates_key,
    changes_stream,
    history_stream,
    index_key,
    live_key,
    physical,
    positions_key,
    rank_key,
    realtime_attempts_key,
    rows_key,
    shard_for,
)
from liveviews.errors import ConfigurationError
from liveviews.log import deadletters
from liveviews.log.events import log_stream
from liveviews.pipeline.views import DEAD_LETTER_VIEW
from liveviews.store.client import (
    Client,
    check_acknowledged,
    is_cluster,
    node_client,
    queue_acknowledge,
    retrying,
)

log = logging.getLogger("liveviews.sink")

CALL_OPS = 5000
"""Row changes per Lua call, about 50-100 ms of store time; a key's changes are never split."""
BUILD_CALL_OPS = 500
"""Row changes per call of a version being built: the store runs one call at a time, so the
serving versions' sinks and the gateways' reads wait behind each; ~10 ms calls keep a rebuild's
writes from adding to readers' latency (docs/performance/rebuild.md)."""

Group = tuple[str, str]  # (view, key)
EndOffsets = Callable[[int], dict[int, str]]  # batch id -> entry id read to, per log partition
Op = tuple[str, str, str, float]  # (kind, row, value, score)


def _script(name: str) -> str:
    return resources.files("liveviews.pipeline").joinpath(name).read_text()


def sink_script() -> str:
    """The text of ``sink.lua``, which the Real-Time Mode writer runs too."""
    return _script("sink.lua")


class ChangeTopicSink:
    """``foreachBatch(sink)``: idempotent by (pipeline version, batch id).

    ``namespace`` is the pipeline version's (``liveviews.pipeline.versions``): its views' rows, its
    batches and its frontier are stored under names that carry it.
    """

    def __init__(
        self,
        client: Client,
        app: App,
        name: str,
        shards: int,
        retention: int,
        pipelines: Sequence[str] = (),
        ends: EndOffsets | None = None,
        namespace: str = "",
        ack_replicas: int = 0,
        call_ops: int = CALL_OPS,
        log_in_store: bool = True,
    ) -> None:
        self.client = client
        # The log's heads, for each frontier's lag, are read from the store's streams; a Kafka
        # log's positions hold no time, so no lag is recorded there (frontier.lua).
        self.log_in_store = log_in_store
        self.call_ops = call_ops
        # Replicas that confirm each of the batch's writes before Spark commits it.
        self.ack_replicas = ack_replicas
        self.namespace = namespace
        self.qualified = name + namespace
        # How far each batch read the log (``liveviews.pipeline.offsetlog.BatchEnds`` in the job).
        self.ends = ends
        self.name = name
        # The views' frontier is the oldest of these pipelines' frontiers (just ours by default).
        self.pipelines = list(pipelines) or [name]
        self.shards = shards
        self.retention = retention
        self.limits = {v.name: v.limit or 0 for v in app.views.values()}
        self.listed = {v.name: int(v.listable) for v in app.views.values()}
        self.apply_shard = client.register_script(_script("sink.lua"))
        self.advance = client.register_script(_script("frontier.lua"))

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        if self.ends is None:
            raise ConfigurationError("a sink used by a query needs to know where batches end.")
        t0 = time.perf_counter()
        rows = batch.toArrow().to_pylist()  # far smaller in the JVM than collect()'s rows
        t1 = time.perf_counter()
        self.write(rows, batch_id, self.ends(batch_id))
        log.debug(
            "batch %d: %d rows, spark %.0f ms, store %.0f ms",
            batch_id, len(rows), (t1 - t0) * 1000, (time.perf_counter() - t1) * 1000,
        )  # fmt: skip

    def write(self, rows: list[Any], batch_id: int, read_to: dict[int, str] | None = None) -> None:
        """Applies a batch's row changes, then advances the frontier to ``read_to``: the entry
        id each log partition was read to by the end of the batch."""
        read_to = read_to or {}
        groups: dict[Group, list[Op]] = defaultdict(list)
        letter_rows = []
        for r in rows:
            if r["view"] == DEAD_LETTER_VIEW:
                letter_rows.append(r)
                continue
            if r["view"] not in self.limits:
                raise ConfigurationError(f"a pipeline wrote to undeclared view {r['view']!r}.")
            kind = "d" if r["value"] is None else "u"
            groups[(r["view"], r["key"])].append((kind, r["row"], r["value"] or "", r["score"]))
        by_shard: dict[int, list[tuple[Group, list[Op]]]] = defaultdict(list)
        for group, ops in groups.items():
            by_shard[shard_for(group[0], group[1], self.shards)].append((group, ops))
        letters = self._dead_letters(letter_rows, batch_id) if letter_rows else []
        batch = Batch(batch_id, letters, by_shard, len(rows) - len(letter_rows), read_to)
        if is_cluster(self.client):
            write = functools.partial(self._write_nodes, batch)
        else:
            write = functools.partial(self._write_one, batch)
        # A store that refuses writes for a while (a full disk, its maxmemory) pauses the
        # batch: a JVM's restart would cost ~10 s more once it takes them again.
        retrying(write, self.client, f"writing batch {batch_id}", refusals=True)

    def advance_frontier(self, batch_id: int, read_to: dict[int, str], events: int) -> None:
        """Advances the frontier alone, to ``read_to``: for a query in Real-Time Mode, whose
        writer applied the epoch's changes as they came, once Spark reports the epoch done
        (``liveviews.pipeline.realtime.frontier``). The epoch's record of its writers goes."""
        batch = Batch(batch_id, [], {}, events, read_to)

        def write() -> None:
            heads = self._heads(read_to)
            control = self.client
            if is_cluster(control):
                control = node_client(control, FRONTIER_KEY)  # type: ignore[arg-type]
            with control.pipeline(transaction=False) as pipe:
                self._queue_frontier(pipe, batch, heads)
                pipe.delete(realtime_attempts_key(self.qualified, batch_id))
                self._execute_acknowledged(pipe)

        retrying(write, self.client, f"advancing the frontier to epoch {batch_id}", refusals=True)

    def _write_one(self, batch: Batch) -> None:
        """A single server: the whole batch on one pipeline."""
        heads = self._heads(batch.read_to)
        with self.client.pipeline(transaction=False) as pipe:
            # First, so a replay of this batch finds its bad events already set aside.
            deadletters.record(pipe, batch.letters)
            self._queue_shards(pipe, batch, sorted(batch.by_shard))
            # Last in the same pipeline: the store runs a connection's commands in order, so the
            # frontier advances after every delta of the batch is written; and a gateway whose
            # read wakes on the first delta reads the frontier that covers it in the same read
            # (the store answers it once it has run what arrived with that delta).
            self._queue_frontier(pipe, batch, heads)
            asked = queue_acknowledge(pipe, self.ack_replicas)
            got = pipe.execute()
        if asked:
            check_acknowledged(got[-1], self.ack_replicas)

    def _write_nodes(self, batch: Batch) -> None:
        """A store cluster: one pipeline per node, as no script may run in a cluster's
        pipeline; its dead letters first, then its shards, then the frontier, which must come
        after every delta it covers. Each node's writes are acknowledged on the connection
        that made them (``LV_STORE_ACK_REPLICAS``)."""
        client = self.client
        assert isinstance(client, RedisCluster)
        if batch.letters:
            with node_client(client, deadletters.ORDER_STREAM).pipeline(transaction=False) as pipe:
                deadletters.record(pipe, batch.letters)
                self._execute_acknowledged(pipe)
        nodes: dict[str, list[int]] = defaultdict(list)
        servers: dict[str, redis.Redis] = {}
        for shard in sorted(batch.by_shard):
            node = client.get_node_from_key(changes_stream(shard))
            nodes[node.name].append(shard)
            servers[node.name] = node_client(client, changes_stream(shard))
        for name, shards in nodes.items():
            with servers[name].pipeline(transaction=False) as pipe:
                self._queue_shards(pipe, batch, shards)
                self._execute_acknowledged(pipe)
        heads = self._heads(batch.read_to)
        with node_client(client, FRONTIER_KEY).pipeline(transaction=False) as pipe:
            self._queue_frontier(pipe, batch, heads)
            self._execute_acknowledged(pipe)

    def _execute_acknowledged(self, pipe: Any) -> None:
        asked = queue_acknowledge(pipe, self.ack_replicas)
        got = pipe.execute()
        if asked:
            check_acknowledged(got[-1], self.ack_replicas)

    def _queue_shards(self, pipe: Any, batch: Batch, shards: list[int]) -> None:
        for shard in shards:
            for calls, chunk in enumerate(_chunks(batch.by_shard[shard], self.call_ops)):
                if calls and len(pipe) >= 8:
                    pipe.execute()  # let replies flow back while later calls are built
                self._queue_call(pipe, shard, chunk, batch.id, final=False)
            self._queue_call(pipe, shard, [], batch.id, final=True)

    def _heads(self, read_to: dict[int, str]) -> dict[int, str]:
        """The newest entry id of each log partition the batch read, read just before the
        frontier moves, for its lag (``frontier.lua``); none when the log is not in the store."""
        if not self.log_in_store:
            return {}
        with self.client.pipeline(transaction=False) as pipe:
            for partition in sorted(read_to):
                pipe.xrevrange(log_stream(partition), count=1)
            found: list[Any] = pipe.execute() if read_to else []
        return {p: h[0][0].decode() for p, h in zip(sorted(read_to), found, strict=True) if h}

    def _queue_frontier(self, pipe: Any, batch: Batch, heads: dict[int, str]) -> None:
        args: list[Any] = [self.qualified, batch.id, VIEWS_FRONTIER, batch.changes]
        args += [len(self.pipelines), *self.pipelines]
        for partition in sorted(batch.read_to):
            args += [partition, batch.read_to[partition], heads.get(partition, "")]
        keys = [FRONTIER_KEY, FRONTIER_BATCHES_KEY, PROGRESS_STREAM, ACTIVE_KEY,
                history_stream(self.qualified)]  # fmt: skip
        if self.log_in_store:
            keys.append(FRONTIER_LAG_KEY)
        else:  # no lag recorded, nor one left from another log
            pipe.hdel(FRONTIER_LAG_KEY, self.qualified)
        self.advance(keys=keys, args=args, client=pipe)

    def _dead_letters(self, rows: list[Any], batch_id: int) -> list[deadletters.DeadLetter]:
        """The records of the events a view set aside, each with its entry from the log."""
        events = [r["key"] for r in rows if not r["key"].startswith("timer:")]
        entries = dict(zip(events, deadletters.read_entries(self.client, events), strict=True))
        out = []
        for r in rows:
            why = orjson.loads(r["value"])
            out.append(deadletters.letter(
                self.qualified, r["key"], r["row"], why["error"], trace=why["traceback"],
                fields=entries.get(r["key"]), batch=batch_id,
            ))  # fmt: skip
        return out

    def _queue_call(
        self,
        pipe: Any,
        shard: int,
        groups: list[tuple[Group, list[Op]]],
        batch_id: int,
        *,
        final: bool,
    ) -> None:
        keys: list[str] = [changes_stream(shard), batches_key(shard), positions_key(shard),
                           live_key(shard)]  # fmt: skip
        args: list[Any] = [self.qualified, batch_id, self.retention, int(final), len(groups),
                           self.name, self.namespace]  # fmt: skip
        for (view, key), ops in groups:
            name = physical(view, self.namespace)
            keys += [rows_key(shard, name, key), candidates_key(shard, name, key),
                     rank_key(shard, name, key), index_key(shard, name)]  # fmt: skip
            args += [name, key, self.limits[view], self.listed[view], len(ops)]
            for kind, row, value, score in ops:
                args += [kind, row, value, repr(score)]
        self.apply_shard(keys=keys, args=args, client=pipe)


@dataclass(frozen=True)
class Batch:
    """One micro-batch's writes, ready to send (again, after a failover: it is idempotent)."""

    id: int
    letters: list[deadletters.DeadLetter]
    by_shard: dict[int, list[tuple[Group, list[Op]]]]
    changes: int
    """Row changes to views, dead letters aside."""
    read_to: dict[int, str]


def _chunks(groups: list[tuple[Group, list[Op]]], most: int) -> list[list[tuple[Group, list[Op]]]]:
    """Consecutive runs of whole groups with about ``most`` row changes each."""
    out: list[list[tuple[Group, list[Op]]]] = [[]]
    size = 0
    for group in groups:
        if size and size + len(group[1]) > most:
            out.append([])
            size = 0
        out[-1].append(group)
        size += len(group[1])
    return out if out[0] else []
