"""A Kafka log's records read back as the store's log entries are (``type``, ``key``, ``time``,
``payload`` fields, those the record has), and appended again: what dead letters need of the
log on Kafka. A failed micro-batch's records are set aside from a range of positions
(``liveviews.pipeline.recovery``), and a replayed dead letter is its record appended again
(``liveviews.log.deadletters.replay``).

Positions are Kafka's offsets plus one (``liveviews.log.kafka.records``): the records of a
range ``(after, last]`` are at offsets ``after`` to ``last - 1``. Only committed records are
read, as the pipeline reads them.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

from liveviews.log.events import FIELD_KEY, FIELD_PAYLOAD, FIELD_TIME, FIELD_TYPE
from liveviews.log.kafka.clients import kafka_config
from liveviews.log.kafka.records import (
    HEADER_TIME,
    HEADER_TYPE,
    entry_fields,
    header,
    offset_of,
    position,
)
from liveviews.log.kafka.topic import ADMIN_TIMEOUT_S, LogUnavailable

Entry = tuple[str, dict[bytes, bytes]]
"""(position, fields): a record as the store's log would hold it."""
CHUNK = 5000


def read_range(bootstrap: str, topic: str, partition: int, after: int, last: int
               ) -> Iterator[list[Entry]]:  # fmt: skip
    """The committed records of ``partition`` at positions ``(after, last]``, in chunks."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    if last <= after:
        return
    consumer = Consumer(kafka_config(bootstrap, **{
        "group.id": f"liveviews-entries-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False,
        "isolation.level": "read_committed", "enable.partition.eof": True,
    }))  # fmt: skip
    try:
        consumer.assign([TopicPartition(topic, partition, after)])
        chunk: list[Entry] = []
        deadline = time.monotonic() + ADMIN_TIMEOUT_S
        while True:
            msg = consumer.poll(0.5)
            if msg is None:
                if time.monotonic() > deadline:
                    raise LogUnavailable(f"the Kafka log did not answer a read of partition "
                                         f"{partition} within {ADMIN_TIMEOUT_S:g} s")  # fmt: skip
                continue
            deadline = time.monotonic() + ADMIN_TIMEOUT_S
            error = msg.error()
            if error is not None:
                if error.code() != KafkaError._PARTITION_EOF:
                    raise LogUnavailable(f"the Kafka log could not be read: {error.str()}")
                break  # the committed end: a range read by the pipeline ends at most here
            offset = msg.offset()
            assert offset is not None  # a record's, not an event's
            if offset >= last:
                break
            headers = msg.headers()
            fields = entry_fields(header(headers, HEADER_TYPE), msg.key(),
                                  header(headers, HEADER_TIME), msg.value())  # fmt: skip
            chunk.append((position(offset), fields))
            if len(chunk) == CHUNK:
                yield chunk
                chunk = []
            if offset + 1 >= last:
                break
        if chunk:
            yield chunk
    finally:
        consumer.close()


def read_entry(bootstrap: str, topic: str, partition: int, at: str) -> dict[bytes, bytes] | None:
    """The fields of the record at position ``at``; None if the log no longer holds it (its
    retention dropped it) or never did."""
    # The range holds at most that one record: Kafka's offset ``at - 1``.
    for chunk in read_range(bootstrap, topic, partition, int(at) - 1, int(at)):
        for _, fields in chunk:
            return fields
    return None


def append_entry(bootstrap: str, topic: str, partition: int, fields: dict[bytes, bytes]) -> str:
    """Appends a record of ``fields`` to ``partition`` as it is (a dead letter's, to replay it);
    its offset (``<partition>:<position>``)."""
    from confluent_kafka import Producer

    headers = [(HEADER_TYPE, fields.get(FIELD_TYPE)), (HEADER_TIME, fields.get(FIELD_TIME))]
    producer = Producer(kafka_config(bootstrap, **{"enable.idempotence": True, "acks": "all"}))
    answers: list[Any] = []
    producer.produce(topic, fields.get(FIELD_PAYLOAD), fields.get(FIELD_KEY), partition=partition,
                     headers=[(k, v) for k, v in headers if v is not None],
                     on_delivery=lambda err, msg: answers.append((err, msg)))  # fmt: skip
    producer.flush(ADMIN_TIMEOUT_S)
    if not answers or answers[0][0] is not None:
        why = answers[0][0].str() if answers else "no acknowledgement in time"
        raise LogUnavailable(f"the Kafka log did not take the replayed record ({why})")
    msg = answers[0][1]
    return str(offset_of(msg.partition(), msg.offset()))
