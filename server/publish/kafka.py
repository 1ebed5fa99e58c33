"""The gateway's appends to a Kafka log (``LV_KAFKA``): ``liveviews.log.kafka.append``'s writer,
waited for from the event loop.

A lone event without a client's idempotency key (most publishes) goes through the idempotent
producer and is awaited on a future that the producer's poll thread resolves, so no thread of
the gateway waits for it (confluent-kafka's ``Producer``, chosen by ``bench.kafkaclients``:
docs/performance/kafka.md). A batch of several events (one Kafka transaction) and any append
under a client's idempotency key (a record in the store first) run on a worker thread, as the
writer's own synchronous calls.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from liveviews.app import App
from liveviews.log.append import Idempotency
from liveviews.log.events import Event, Offset
from liveviews.log.kafka.append import ACK_TIMEOUT_S, KafkaEventLog, unconfirmed
from liveviews.log.kafka.topic import LogUnavailable
from liveviews.pipeline.settings import Settings
from liveviews.store import client as storeclient

WORKERS = 64


class KafkaAppender:
    """Appends validated batches to the Kafka log for one gateway process."""

    def __init__(self, log: KafkaEventLog) -> None:
        self.log = log
        # Its threads mostly wait (on the store, on Kafka's acknowledgement), so many at once:
        # asyncio's default pool (cores + 4 threads) held keyed publishes to 400/s on 2 cores.
        self.pool = ThreadPoolExecutor(WORKERS, thread_name_prefix="liveviews-kafka-append")

    @classmethod
    def open(cls, settings: Settings, app: App) -> KafkaAppender:
        """The writer of the log ``settings`` name; refuses with a sentence (``LogUnavailable``,
        ``StoreMismatch``) when the brokers do not answer or the topic does not fit."""
        assert settings.kafka is not None
        store = storeclient.connect(settings.store_url)
        log = KafkaEventLog(settings.kafka, app, settings.log_partitions, store,
                            topic=settings.kafka_topic)  # fmt: skip
        return cls(log)

    async def append(self, events: Sequence[Event], idempotency: Idempotency) -> list[Offset]:
        if not events:
            return []
        if len(events) == 1 and not idempotency.given:
            return [await self._one(events[0])]
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.pool, self.log.append_validated, events,
                                          idempotency)  # fmt: skip

    async def _one(self, event: Event) -> Offset:
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

        self.log.send_one(event, None, report)
        try:
            return await asyncio.wait_for(answer, ACK_TIMEOUT_S)
        except TimeoutError:
            raise unconfirmed("no acknowledgement in time") from None

    def close(self) -> None:
        self.pool.shutdown()
        self.log.close()
