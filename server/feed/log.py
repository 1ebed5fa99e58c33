"""The log feed: this process's one reader of the event log, for ``GET /v1/log/live``.

It shows events as they are appended, the raw input of the views, so a demo or an operator can
watch the log. One task reads every ``lv:log:<p>`` stream with a blocking XREAD and hands each
entry, encoded once as a ``log`` frame, to its readers; it keeps the newest ``RECENT`` frames
so a new reader sees the recent past at once. Like the hub it never waits for a reader: one
whose buffer is full is marked overflowed. A reader is a stream's source of frames, which the
sender of a view's subscription delivers (``liveviews.gateway.live.sender``): its heartbeats,
its end at token expiry and as a slow consumer are a subscription's.

On a store cluster the partitions are in different hash slots, which no one XREAD spans: the
task reads each partition with a command of its own, one pipeline per server, and polls every
``POLL_SECONDS`` while nothing is new instead of blocking.

The task starts with the first reader, not with the process, so a gateway nobody watches the
log of costs the store nothing more; it runs until the gateway stops. The feed is informative:
it has no event ids and no resume, and a reader that reconnects gets the recent past again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from typing import Any

from liveviews.changes.topic import NO_POSITION
from liveviews.gateway.errors import SLOW_CONSUMER, SlowConsumer, Unavailable
from liveviews.gateway.fanout.subscriber import Subscriber, SubscriberState
from liveviews.gateway.feed import nodes
from liveviews.gateway.feed.changes import back_off
from liveviews.gateway.feed.store import STORE_ERRORS, Client, Part, end_if_cancelled, read_cut
from liveviews.gateway.wire import frames
from liveviews.gateway.wire.eventid import position_tuple
from liveviews.log.events import decode_entry, log_stream

log = logging.getLogger("liveviews.gateway.log")

RECENT = 100
READ_COUNT = 500
START_TIMEOUT = 5.0
POLL_SECONDS = 0.25


Entry = tuple[str, bytes, dict[bytes, bytes]]


class LogReader:
    """One ``/v1/log/live`` stream: the ``recent`` newest frames, then each new one
    (a ``liveviews.gateway.live.source.FrameSource``).

    Its frames wait in a buffer of the feed's ``buffer`` frames; its ``subscriber``, of no hub,
    holds its state and wakes its sender, as a query-shaped subscription's does.
    """

    history = None
    """The feed has no ids to resume from, so no history to read."""
    cursor = None
    """The hub never writes to it: its frames are the feed's."""

    def __init__(self, feed: LogFeed, recent: int) -> None:
        self.feed = feed
        self.recent = recent
        self.last_event_id: str | None = None  # no ids: its end frames name none
        self.subscriber: Subscriber | None = None
        self.buffer: deque[frames.Frame] = deque()

    def __str__(self) -> str:
        return "the log feed"

    async def start(self) -> list[frames.Frame]:
        """Attach to the feed; its ``recent`` newest frames."""
        if self.subscriber is not None:
            raise RuntimeError("Cannot start a log reader twice.")
        # Of no hub, so of no view, key or frontier; made before the feed may offer it anything.
        self.subscriber = Subscriber("", "", self.feed.buffer, "", shared=False)
        recent = await self.feed.attach(self)
        return recent[len(recent) - self.recent :] if self.recent else []

    def offer(self, frame: frames.Frame) -> bool:
        """Buffer ``frame`` and wake the sender; False if the reader overflowed, now or before."""
        sub = self.subscriber
        assert sub is not None
        if sub.state is not SubscriberState.ATTACHED:
            return False
        if len(self.buffer) >= sub.capacity:
            self.buffer.clear()
            sub.overflow()
            return False
        self.buffer.append(frame)
        sub.wake()
        return True

    def has_frames(self) -> bool:
        return bool(self.buffer)

    async def next_frames(self) -> list[frames.Frame]:
        sub = self.subscriber
        assert sub is not None
        if sub.state is SubscriberState.OVERFLOWED:
            raise SlowConsumer(SLOW_CONSUMER)
        out = list(self.buffer)
        self.buffer.clear()
        sub.clear()
        return out

    def close(self) -> None:
        self.feed.detach(self)


class LogFeed:
    """Reads the log and fans each new event out to the readers: the readers, the recent
    frames and the reading task, whichever log is read (``StoreLogFeed`` or
    ``liveviews.gateway.feed.kafkalog.KafkaLogFeed``)."""

    def __init__(self, *, buffer: int = 256, block_ms: int = 1000) -> None:
        self.buffer = buffer
        self.block_ms = block_ms
        self.readers: set[LogReader] = set()
        self.recent: deque[frames.Frame] = deque(maxlen=RECENT)
        self.started = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def attach(self, reader: LogReader) -> list[frames.Frame]:
        """Hand ``reader`` each new frame from now on; the recent past. Starts the reading
        task on first use."""
        if self._task is None:
            self._task = asyncio.create_task(self.run(), name="liveviews-log-feed")
        if not self.started.is_set():
            try:
                await asyncio.wait_for(asyncio.shield(self.started.wait()), START_TIMEOUT)
            except TimeoutError:
                raise Unavailable(
                    "the gateway cannot read the log yet; is the store reachable? Try again.",
                    code="store_unavailable",
                ) from None
        self.readers.add(reader)
        return list(self.recent)

    def detach(self, reader: LogReader) -> None:
        self.readers.discard(reader)

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self._close()

    async def run(self) -> None:
        """Read until cancelled; failures are retried with backoff, never raised."""
        failures = 0
        while True:
            try:
                if not self.started.is_set():
                    await self._start()
                while True:
                    await self._read()
                    end_if_cancelled()
                    failures = 0
            except asyncio.CancelledError:
                raise
            except STORE_ERRORS as exc:
                end_if_cancelled()
                failures = await back_off(failures, "log feed", exc)
                await self._recover()

    def fan_out(self, out: list[frames.Frame]) -> None:
        """Keep each frame among the recent ones and offer it to every reader."""
        dropped: list[LogReader] = []
        for frame in out:
            self.recent.append(frame)
            dropped.extend(x for x in self.readers if not x.offer(frame))
        for reader in dropped:
            self.readers.discard(reader)

    async def _start(self) -> None:
        """Load the recent past, set ``started``, and begin after it."""
        raise NotImplementedError

    async def _read(self) -> None:
        """Read what is new, waiting up to ``block_ms``, and ``fan_out`` it."""
        raise NotImplementedError

    async def _recover(self) -> None:
        """After a failure, before reading again."""

    async def _close(self) -> None:
        """What the reading held, once the task is cancelled."""


class StoreLogFeed(LogFeed):
    """Reads the store's log partitions (``lv:log:<p>``)."""

    def __init__(
        self, client: Client, partitions: int, *, buffer: int = 256, block_ms: int = 1000
    ) -> None:
        super().__init__(buffer=buffer, block_ms=block_ms)
        self.client = client
        self.streams = [log_stream(p) for p in range(partitions)]
        self.positions: dict[str, str] = {}

    async def _recover(self) -> None:
        with contextlib.suppress(*STORE_ERRORS):
            await nodes.refresh(self.client)  # a failover may have moved slots

    async def _close(self) -> None:
        await nodes.close(self.client)

    async def _start(self) -> None:
        """Load the newest entries of every partition and begin after them."""

        def recent(stream: str) -> Part:
            async def queue(pipe: Any) -> None:
                pipe.xrevrange(stream, count=RECENT)

            return Part(stream, queue)

        results = [r for (r,) in await read_cut(self.client, list(map(recent, self.streams)))]
        entries: list[Entry] = []
        for stream, newest in zip(self.streams, results, strict=True):
            self.positions[stream] = newest[0][0].decode() if newest else NO_POSITION
            entries.extend((stream, i, f) for i, f in reversed(newest))
        for frame in self._frames(entries)[-RECENT:]:
            self.recent.append(frame)
        self.started.set()

    async def _read(self) -> None:
        result: Any
        if nodes.is_cluster(self.client):
            result = await self._poll()
            if not result:
                await asyncio.sleep(min(POLL_SECONDS, self.block_ms / 1000))
        else:
            result = await self.client.xread(
                self.positions,  # type: ignore[arg-type]
                count=READ_COUNT,
                block=self.block_ms,
            )
        entries: list[Entry] = []
        for raw_name, stream_entries in result or []:
            name = raw_name.decode() if isinstance(raw_name, bytes) else str(raw_name)
            if stream_entries:
                self.positions[name] = stream_entries[-1][0].decode()
                entries.extend((name, i, f) for i, f in stream_entries)
        self.fan_out(self._frames(entries))

    async def _poll(self) -> list[Any]:
        """A non-blocking XREAD of each partition, one pipeline per server of a cluster."""

        async def read(server: Any, indexes: list[int]) -> list[Any]:
            async with server.pipeline(transaction=False) as pipe:
                for i in indexes:
                    stream = self.streams[i]
                    pipe.xread({stream: self.positions[stream]}, count=READ_COUNT)
                return [s for reply in await pipe.execute() for s in reply or []]

        groups = await nodes.by_node(self.client, self.streams)
        return [s for found in await asyncio.gather(*(read(*g) for g in groups)) for s in found]

    def _frames(self, entries: list[Entry]) -> list[frames.Frame]:
        """Frames of entries from several partitions, in the order they were appended."""
        out = []
        for stream, entry_id, fields in sorted(
            entries, key=lambda e: (position_tuple(e[1].decode()), e[0])
        ):
            partition = int(stream.rsplit(":", 1)[1])
            try:
                event = decode_entry(partition, entry_id, fields)
            except (KeyError, ValueError):
                log.warning("skipping a malformed log entry %s in %s", entry_id, stream)
                continue
            out.append(frames.log_entry(event))
        return out
