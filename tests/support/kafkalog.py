"""Reading a Kafka log back in tests, as a reader of committed records sees it."""

from __future__ import annotations

import time
from collections.abc import Collection, Iterable
from typing import Any

from confluent_kafka import Consumer, KafkaError, TopicPartition

from liveviews.changes.topic import VIEWS_FRONTIER, read_frontier
from liveviews.client.offsets import covers as reflected
from liveviews.log.events import LoggedEvent, Offset
from liveviews.log.kafka.records import decode_record, position

PARTITIONS = 4  # of the topics the tests of a Kafka log write


def covers(frontier: dict[int, str], offsets: Iterable[Offset]) -> bool:
    """Whether ``frontier`` (as ``read_frontier`` gives it) covers ``offsets`` of a Kafka log,
    as a client's ``reflects()`` decides it."""
    return reflected({str(p): at for p, at in frontier.items()}, offsets)


def frontier_covers(store: Any, offsets: Iterable[Offset]) -> bool:
    """Whether the views' frontier covers ``offsets`` of a Kafka log."""
    return covers(read_frontier(store, VIEWS_FRONTIER), offsets)


def read_kafka_log(
    bootstrap: str, topic: str, partitions: int, count: int, timeout: float = 20.0,
    skip: Collection[str] = (),
) -> list[list[LoggedEvent]]:  # fmt: skip
    """Each partition's committed events in order, once the log holds at least ``count`` (a
    transaction's records become readable a moment after its commit returns), read to its end;
    less the records at ``skip`` (``<partition>:<position>``: records that are not events)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "tests",
                         "isolation.level": "read_committed", "enable.partition.eof": True})  # fmt: skip
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    at_end: set[int] = set()
    got: list[list[LoggedEvent]] = [[] for _ in range(partitions)]
    deadline = time.monotonic() + timeout
    try:
        while sum(map(len, got)) < count or len(at_end) < partitions:
            read = sum(map(len, got))
            assert time.monotonic() < deadline, f"{read} of {count} events read in {timeout} s"
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            partition, error = msg.partition(), msg.error()
            assert partition is not None
            if error is not None:
                assert error.code() == KafkaError._PARTITION_EOF, error
                at_end.add(partition)
                continue
            at_end.discard(partition)
            offset, (_, stamp) = msg.offset(), msg.timestamp()
            assert offset is not None
            if f"{partition}:{position(offset)}" in skip:
                continue
            got[partition].append(decode_record(partition, offset, msg.key() or b"",
                                                msg.value() or b"", msg.headers(), stamp))  # fmt: skip
    finally:
        consumer.close()
    return got
