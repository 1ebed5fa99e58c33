"""The gateway's appends to a Kafka log (``LV_KAFKA``): ``liveviews.log.kafka.append``'s writer,
waited for from the event loop.

A lone event goes through the idempotent producer and is awaited on a future that the
producer's poll thread resolves, so no thread of the gateway waits for it (confluent-kafka's
``Producer``, chosen by ``bench.kafkaclients``: docs/performance/kafka.md). A batch of several
events (one Kafka transaction) runs on a worker thread, as the writer's own synchronous call.
Under a client's idempotency key the batch's record is claimed and then marked done in the
store from the event loop, on the gateway's own store client (``claim.lua``); a record found
there already (an answered, pending or refused key) is left to the writer's rules, on a worker
thread.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from liveviews.app import App
from liveviews.gateway.feed import store
from liveviews.log.append import Idempotency
from liveviews.log.events import Event, Offset
from liveviews.log.kafka.append import ACK_TIMEOUT_S, KafkaEventLog, NotAppended, unconfirmed
from liveviews.log.kafka.appended import CLAIM_SCRIPT, RECORD_PREFIX, done_record
from liveviews.log.kafka.topic import LogUnavailable
from liveviews.pipeline.settings import Settings
from liveviews.store import client as storeclient

WORKERS = 64
T = TypeVar("T")


class KafkaAppender:
    """Appends validated batches to the Kafka log for one gateway process."""

    def __init__(self, log: KafkaEventLog, client: store.Client) -> None:
        self.log = log
        self.client = client
        self.claim = client.register_script(CLAIM_SCRIPT)
        # Its threads mostly wait (on the store, on Kafka's acknowledgement), so many at once:
        # asyncio's default pool (cores + 4 threads) held keyed publishes to 400/s on 2 cores.
        self.pool = ThreadPoolExecutor(WORKERS, thread_name_prefix="liveviews-kafka-append")

    @classmethod
    def open(cls, settings: Settings, app: App, client: store.Client) -> KafkaAppender:
        """The writer of the log ``settings`` name; refuses with a sentence (``LogUnavailable``,
        ``StoreMismatch``) when the brokers do not answer or the topic does not fit."""
        assert settings.kafka is not None
        sync_store = storeclient.connect(settings.store_url)
        log = KafkaEventLog(settings.kafka, app, settings.log_partitions, sync_store,
                            topic=settings.kafka_topic)  # fmt: skip
        return cls(log, client)

    async def append(self, events: Sequence[Event], idempotency: Idempotency) -> list[Offset]:
        if not events:
            return []
        if not idempotency.given:
            if len(events) == 1:
                return [await self._one(events[0], None)]
            return await self._in_pool(self.log.append_validated, events, idempotency)
        name = RECORD_PREFIX + idempotency.key
        _, *held = await self.claim(keys=[name], args=[idempotency.digest, idempotency.seconds])
        if held:
            return await self._in_pool(self.log.append_validated, events, idempotency)
        try:
            if len(events) == 1:
                offsets = [await self._one(events[0], idempotency.key)]
            else:
                offsets = await self._in_pool(self.log.produce, events, idempotency.key)
        except NotAppended:
            await self.client.delete(name)  # nothing was appended: a retry may go on
            raise
        await self.client.set(name, done_record(idempotency.digest, offsets),
                              ex=idempotency.seconds)  # fmt: skip
        return offsets

    async def _in_pool(self, call: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self.pool, call, *args)

    async def _one(self, event: Event, key: str | None) -> Offset:
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[Offset] = loop.create_future()

        def settle(offset: Offset | None, error: LogUnavailable | None) -> None:
            if answer.done():  # the request went away: the event is in the log all the same
                return
            if error is not None:
                answer.set_exception(error)
            else:
                assert offset is not None
                answer.set_result(offset)

        def report(offset: Offset | None, error: LogUnavailable | None) -> None:
            loop.call_soon_threadsafe(settle, offset, error)  # from the producer's poll thread

        self.log.send_one(event, key, report)
        try:
            return await asyncio.wait_for(answer, ACK_TIMEOUT_S)
        except TimeoutError:
            raise unconfirmed("no acknowledgement in time") from None

    def close(self) -> None:
        self.pool.shutdown()
        self.log.close()
