"""The log feed on a Kafka log (``LV_KAFKA``): ``GET /v1/log/live`` from the log's topic.

The same feed as ``liveviews.gateway.feed.log`` (its readers, recent frames and overflow rule),
read with a Kafka consumer of committed records instead of XREAD. The consumer blocks, so each
read runs on a worker thread, one at a time; a gateway nobody watches the log of starts none.
Frames from several partitions go out in the order the brokers took them (``LogAppendTime``).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from liveviews.gateway.feed.log import READ_COUNT, RECENT, LogFeed
from liveviews.gateway.wire import frames
from liveviews.log.kafka.clients import kafka_config
from liveviews.log.kafka.records import decode_record

log = logging.getLogger("liveviews.gateway.log")

START_READ_S = 30.0


class KafkaLogFeed(LogFeed):
    """Reads the Kafka log's partitions and fans each new record out to the readers."""

    def __init__(
        self, bootstrap: str, topic: str, partitions: int, *, buffer: int = 256,
        block_ms: int = 1000,
    ) -> None:  # fmt: skip
        super().__init__(buffer=buffer, block_ms=block_ms)
        self.bootstrap, self.topic, self.partition_count = bootstrap, topic, partitions
        self.consumer: Any = None

    async def _start(self) -> None:
        """Begin ``RECENT`` records before each partition's end and keep the newest of them."""
        records = await asyncio.to_thread(self._open)
        for frame in self._record_frames(records)[-RECENT:]:
            self.recent.append(frame)
        self.started.set()

    def _open(self) -> list[Any]:
        from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

        consumer = Consumer(kafka_config(self.bootstrap, **{
            "group.id": "liveviews-log-feed", "enable.auto.commit": False,
            "isolation.level": "read_committed", "enable.partition.eof": True}))  # fmt: skip
        try:
            starts = []
            for p in range(self.partition_count):
                low, high = consumer.get_watermark_offsets(TopicPartition(self.topic, p), 10)
                starts.append(TopicPartition(self.topic, p, max(low, high - RECENT)))
            consumer.assign(starts)
            records: list[Any] = []
            at_end: set[int] = set()
            while len(at_end) < self.partition_count:
                msg = consumer.poll(START_READ_S)
                if msg is None:
                    break  # what was read so far is the recent past
                error = msg.error()
                if error is None:
                    records.append(msg)
                elif error.code() == KafkaError._PARTITION_EOF:
                    at_end.add(msg.partition() or 0)
        except KafkaException as exc:
            consumer.close()
            raise ConnectionError(f"the Kafka log did not answer: {exc.args[0].str()}") from None
        self.consumer = consumer
        return records

    async def _read(self) -> None:
        from confluent_kafka import KafkaException

        try:
            got = await asyncio.to_thread(self.consumer.consume, READ_COUNT, self.block_ms / 1000)
        except KafkaException as exc:
            raise ConnectionError(f"the Kafka log did not answer: {exc.args[0].str()}") from None
        self.fan_out(self._record_frames([m for m in got if m.error() is None]))

    def _record_frames(self, records: list[Any]) -> list[frames.Frame]:
        out = []
        for msg in sorted(records, key=lambda m: (m.timestamp()[1], m.partition(), m.offset())):
            try:
                event = decode_record(msg.partition(), msg.offset(), msg.key() or b"",
                                      msg.value() or b"", msg.headers(),
                                      msg.timestamp()[1])  # fmt: skip
            except ValueError:
                log.warning("skipping a record of the log that is not an event: %s:%s",
                            msg.partition(), msg.offset())  # fmt: skip
                continue
            out.append(frames.log_entry(event))
        return out

    async def _close(self) -> None:
        if self.consumer is not None:
            await asyncio.to_thread(self.consumer.close)
