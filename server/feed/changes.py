"""The change feed: this process's one reader of the change topic.

One task reads every shard stream and ``lv:{m}:progress`` and hands what it reads to the hub, so a
gateway costs the store one reader however many clients it serves. Each read is a MULTI
transaction of the store's epoch and a non-blocking XREAD: the epoch, the deltas and the
progress it returns are one consistent cut of the store, in which a progress entry never
precedes the deltas it covers. Between reads with nothing new, a blocking XREAD waits for the
next entry; its result is only a wake-up, the transactional read takes the entries. On a single
server both go in one write, on a connection the feed holds (``liveviews.gateway.feed.pipelined``):
the store runs the transaction as soon as the wait ends, so a batch costs one round trip.

On a store cluster no transaction spans the shards' and ``lv:{m}:`` hash slots, so each read is
a MULTI of the epoch, ``lv:{m}:active`` and an XREAD of ``lv:{m}:progress`` first, then an XREAD
of each shard (one pipeline per server). A progress entry still never precedes the deltas it
covers: the pipeline's sink writes a batch's deltas to the shards before its frontier and
progress entry, so every delta a progress entry covers is in the shards by the time it can be
read, and the shard reads come after. The wait blocks on ``lv:{m}:progress`` only (each batch
ends with an entry there); a delta written without one is read at the latest ``block_ms`` later.
A new version's deltas may come before ``lv:{m}:active`` names it (a switch flips the shards
first): they carry that version's epoch, which no subscriber of the serving version takes.

When the epoch changes (the store was wiped or replaced), the positions of the old store mean
nothing: the feed reads every stream from its start again and tells the hub, whose subscribers
of an older epoch reset. Each read also takes ``lv:{m}:active``, the version of each pipeline that
serves readers: when one changes, the hub resets the subscribers of that pipeline's views
(``view_replaced``), in the same cut as the first deltas of the new version. The feed holds no
state another gateway process needs.

The same reads take ``lv:{m}:waits``: waits posted for SSE streams, wherever they were posted,
passed to the streams of this process they name (``liveviews.gateway.feed.waits``) once the
read's deltas and frontiers are handed out.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

from liveviews.changes.topic import (
    ACTIVE_KEY,
    NO_POSITION,
    PROGRESS_STREAM,
    STREAM_WAITS_STREAM,
    Delta,
    changes_stream,
    decode_delta,
    split_physical,
)
from liveviews.errors import StoreMismatch
from liveviews.gateway.fanout.hub import Hub
from liveviews.gateway.fanout.items import Progress
from liveviews.gateway.feed import nodes
from liveviews.gateway.feed.cuts import Cuts
from liveviews.gateway.feed.pipelined import FeedConnection, hash_of, streams_of
from liveviews.gateway.feed.store import (
    CONTROL_KEY,
    STORE_ERRORS,
    Client,
    Layout,
    Part,
    decode_frontier,
    end_if_cancelled,
    read_cut,
)
from liveviews.gateway.feed.waits import StreamWaits
from liveviews.gateway.metrics import Metrics
from liveviews.gateway.wire import frames
from liveviews.pipeline.versions import composite_epoch
from liveviews.store.upgrade import upgrade_async

log = logging.getLogger("liveviews.gateway.feed")

READ_COUNT = 1000
RETRY_SECONDS = (0.1, 0.5, 1.0, 2.0)


async def back_off(failures: int, what: str, exc: BaseException) -> int:
    """Wait before a store reader's next try; returns the new count of failures in a row."""
    delay = RETRY_SECONDS[min(failures, len(RETRY_SECONDS) - 1)]
    log.warning("%s read failed (%s); retrying in %.1f s", what, exc, delay)
    await asyncio.sleep(delay)
    return failures + 1


class ChangeFeed:
    """Reads the change topic and feeds the hub; ``started`` is set once it has positions."""

    def __init__(
        self,
        client: Client,
        hub: Hub,
        layout: Layout,
        metrics: Metrics,
        *,
        block_ms: int = 1000,
        count: int = READ_COUNT,
        views_of: dict[str, set[str]] | None = None,
        stream_waits: StreamWaits | None = None,
        cuts: Cuts | None = None,
    ) -> None:
        self.client = client
        self.cuts = cuts
        """Told every progress entry read, after the read's deltas: the groups' cuts."""
        self.cluster = nodes.is_cluster(client)
        self.connection = FeedConnection(client)
        """A single server's connection for the feed's reads (``_read``)."""
        self.stream_waits = stream_waits or StreamWaits()
        """The SSE streams of this process that waits posted to any gateway may name."""
        self.hub = hub
        self.layout = layout
        self.metrics = metrics
        self.block_ms = block_ms
        self.count = count
        self.shard_streams = [changes_stream(s) for s in range(layout.shards)]
        self.positions: dict[str, str] = {}
        self.epoch: str | None = None
        self.views_of = views_of or {}
        """Pipeline -> the views it writes."""
        self.namespaces: dict[str, str] = {}
        """Pipeline -> the namespace of its version that serves readers (absent: ``""``)."""
        self.started = asyncio.Event()
        self.healthy = False

    async def run(self) -> None:
        """Read until cancelled; store failures are retried with backoff, never raised."""
        try:
            await self._run()
        finally:
            await self.connection.close()

    async def _run(self) -> None:
        failures = 0
        while True:
            try:
                if self.epoch is None:
                    await self._start()
                more = True  # read at once after a start, without waiting
                while True:
                    more = await self._read(wait=not more)
                    end_if_cancelled()
                    failures = 0
                    self.healthy = True
            except asyncio.CancelledError:
                raise
            except (*STORE_ERRORS, StoreMismatch) as exc:
                self.healthy = False
                self.metrics.feed_errors += 1
                end_if_cancelled()
                failures = await back_off(failures, "change feed", exc)
                with contextlib.suppress(*STORE_ERRORS):
                    await nodes.refresh(self.client)  # a failover may have moved slots

    async def _start(self) -> None:
        """Begin at the streams' current heads: subscribers read a snapshot after this."""
        await upgrade_async(self.client)

        async def control(pipe: Any) -> None:
            self.layout.queue(pipe)
            pipe.hgetall(ACTIVE_KEY)
            pipe.xrevrange(PROGRESS_STREAM, count=1)
            pipe.xrevrange(STREAM_WAITS_STREAM, count=1)

        def head_of(stream: str) -> Part:
            async def queue(pipe: Any) -> None:
                pipe.xrevrange(stream, count=1)

            return Part(stream, queue)

        results, *shards = await read_cut(
            self.client, [Part(CONTROL_KEY, control), *map(head_of, self.shard_streams)]
        )
        epoch = self.layout.epoch(results)
        self.namespaces = _namespaces(results[Layout.RESULTS])
        heads = [*(head for (head,) in shards), *results[Layout.RESULTS + 1 :]]
        streams = [*self.shard_streams, PROGRESS_STREAM, STREAM_WAITS_STREAM]
        self.positions = {
            stream: head[0][0].decode() if head else NO_POSITION
            for stream, head in zip(streams, heads, strict=True)
        }
        self.epoch = epoch
        self.healthy = True
        self.started.set()
        log.info("change feed started in store epoch %s", epoch)

    async def _wait(self) -> None:
        """On a store cluster, wait for the next progress entry or stream wait; a single
        server's wait goes with its read (``_read``)."""
        server = await nodes.node(self.client, PROGRESS_STREAM)
        wanted = {s: self.positions[s] for s in (PROGRESS_STREAM, STREAM_WAITS_STREAM)}
        await server.xread(wanted, count=1, block=self.block_ms)  # type: ignore[arg-type]

    async def _read(self, wait: bool = False) -> bool:
        """One consistent read, after waiting for a new entry if ``wait``; True if a stream may
        hold more than it returned (so read again at once, without waiting). Otherwise the next
        read waits, which ends at once if anything came meanwhile: a read without a wait that
        finds nothing would cost a round trip per batch."""
        if self.cluster:
            if wait:
                await self._wait()
            results = await self._read_cluster()
        else:
            streams = (*self.positions, *self.positions.values())
            transaction = [
                self.layout.command(),
                ("HGETALL", ACTIVE_KEY),
                ("XREAD", "COUNT", self.count, "STREAMS", *streams),
            ]
            blocking = (
                ("XREAD", "COUNT", 1, "BLOCK", self.block_ms, "STREAMS", *streams) if wait else None
            )
            epoch, active, read = await self.connection.transact(transaction, wait=blocking)
            results = [epoch, hash_of(active), streams_of(read)]
        self.metrics.feed_reads += 1
        epoch = self.layout.epoch(results)
        namespaces = _namespaces(results[Layout.RESULTS])
        if epoch != self.epoch:
            log.warning("the store's epoch changed (%s -> %s): re-reading", self.epoch, epoch)
            self.epoch = epoch
            self.namespaces = namespaces
            self.positions = dict.fromkeys(self.positions, NO_POSITION)
            self.metrics.store_epoch_changes += 1
            self.hub.epoch_changed(epoch)
            return True
        if namespaces != self.namespaces:
            self._switched(epoch, namespaces)
        return self._dispatch(epoch, results[Layout.RESULTS + 1] or [])

    async def _read_cluster(self) -> list[Any]:
        """The results of the single server's transaction, read on a cluster: the control part
        (epoch, serving versions, progress) first, then each shard, one pipeline per server."""
        progress_at = {s: self.positions[s] for s in (PROGRESS_STREAM, STREAM_WAITS_STREAM)}

        async def control(pipe: Any) -> None:
            self.layout.queue(pipe)
            pipe.hgetall(ACTIVE_KEY)
            pipe.xread(progress_at, count=self.count)

        (results,) = await read_cut(self.client, [Part(CONTROL_KEY, control)])
        streams: list[Any] = list(results[Layout.RESULTS + 1] or [])
        groups = await nodes.by_node(self.client, self.shard_streams)
        reads = await asyncio.gather(*(self._read_shards(s, i) for s, i in groups))
        for read in reads:
            streams.extend(read)
        return [*results[: Layout.RESULTS + 1], streams]

    async def _read_shards(self, server: Any, indexes: list[int]) -> list[Any]:
        """XREAD of each shard of ``indexes`` on ``server``: one command per shard, since a
        cluster refuses a command over keys of several hash slots."""
        async with server.pipeline(transaction=False) as pipe:
            for i in indexes:
                stream = self.shard_streams[i]
                pipe.xread({stream: self.positions[stream]}, count=self.count)
            replies = await pipe.execute()
        return [stream for reply in replies for stream in reply or []]

    def _switched(self, epoch: str, namespaces: dict[str, str]) -> None:
        """Readers of the pipelines whose serving version changed move to the new one."""
        before, self.namespaces = self.namespaces, namespaces
        for pipeline in sorted(set(before) | set(namespaces)):
            namespace = namespaces.get(pipeline, "")
            if before.get(pipeline, "") == namespace:
                continue
            log.info("pipeline %r: readers move to version %r", pipeline, namespace or "first")
            self.hub.views_replaced(
                self.views_of.get(pipeline, set()),
                composite_epoch(epoch, namespace),
                pipeline + namespace,
            )

    def _dispatch(self, epoch: str, streams: list[list[object]]) -> bool:
        progress_entries: list[tuple[bytes, dict[bytes, bytes]]] = []
        waits: list[tuple[bytes, dict[bytes, bytes]]] = []
        cut = False  # a shard with more entries than one read returns: hold progress back
        newest_ms = 0
        deltas: list[Delta] = []
        for raw_name, entries in streams:
            name = raw_name.decode() if isinstance(raw_name, bytes) else str(raw_name)
            assert isinstance(entries, list)
            if not entries:
                continue
            if name == PROGRESS_STREAM:
                progress_entries = entries
                continue
            if name == STREAM_WAITS_STREAM:
                waits = entries
                self.positions[name] = entries[-1][0].decode()
                continue
            cut = cut or len(entries) >= self.count
            shard = [decode_delta(i, f) for i, f in entries]
            self.positions[name] = shard[-1].id
            newest_ms = max(newest_ms, int(shard[-1].id.split("-")[0]))
            deltas.extend(shard)
        progress: list[Progress] = []
        if progress_entries and not cut:
            self.positions[PROGRESS_STREAM] = progress_entries[-1][0].decode()
            now = time.time()
            newest: dict[bytes, tuple[bytes, dict[bytes, bytes]]] = {}
            for entry_id, fields in progress_entries:
                newest[fields[b"pipeline"]] = (entry_id, fields)  # each frontier's newest only
            for frontier_name, (entry_id, fields) in newest.items():
                frontier = decode_frontier(fields[b"frontier"])
                lag = fields.get(b"lag_ms")
                frame = frames.progress(frontier, int(lag) if lag is not None else None)
                name = frontier_name.decode()
                pipeline, namespace = split_physical(name)
                if self.namespaces.get(pipeline, "") == namespace:  # not a version being built
                    self.metrics.frontier_pushed(frontier, now)
                # A frontier is its pipeline version's: its subscribers' epoch carries the version.
                version_epoch = composite_epoch(epoch, split_physical(name)[1])
                progress.append(Progress(version_epoch, entry_id.decode(), frame, name))
        if deltas or progress:
            self.hub.publish(epoch, deltas, progress)
        if self.cuts is not None and progress_entries and not cut:
            self.cuts.progress(
                (f[b"pipeline"].decode(), int(f[b"batch"]), decode_frontier(f[b"frontier"]))
                for _, f in progress_entries
            )
        if waits:  # after the frontier read with them, which may answer them at once
            self.stream_waits.take(waits)
        if newest_ms:
            self.metrics.feed_lag_seconds = max(0.0, time.time() - newest_ms / 1000)
        return any(isinstance(e, list) and len(e) >= self.count for _, e in streams)


def _namespaces(raw: dict[bytes, bytes]) -> dict[str, str]:
    return {p.decode(): n.decode() for p, n in raw.items() if n}
