"""How far pipelines' frontiers are behind a Kafka log, in events and in time: what
``liveviews.changes.lag`` measures on the store's streams, for ``liveviews status`` and the
gateway's ``/metrics``.

A frontier on Kafka is the next offset each partition's reader will read (PROTOCOL.md, section
4), so the events behind it are the partition's end minus it: exact, never capped (a
transaction's commit marker takes an offset too, so a batch's marker counts as one). The time
lag is how long ago the broker took the oldest event not yet reflected (its ``LogAppendTime``),
read with one fetch per partition behind; 0 when every partition is caught up. On the store's
streams the time lag is the newest entry's time minus the frontier's: the two agree while
events keep coming, and this one keeps growing while a stuck pipeline leaves an old event
unread.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from liveviews.changes.lag import Lag
from liveviews.log.kafka.clients import kafka_config
from liveviews.log.kafka.topic import ADMIN_TIMEOUT_S, LogUnavailable

READ_TIMEOUT_S = 5.0


def _consumer(bootstrap: str) -> Any:
    from confluent_kafka import Consumer

    return Consumer(kafka_config(bootstrap, **{"group.id": "liveviews-lag",
                     "enable.auto.commit": False, "isolation.level": "read_committed",
                     "enable.partition.eof": True}))  # fmt: skip


def log_bounds(bootstrap: str, topic: str, partitions: int) -> dict[int, tuple[int, int]]:
    """Each partition's first and next offsets (Kafka's low and high watermarks)."""
    from confluent_kafka import KafkaException, TopicPartition

    consumer = _consumer(bootstrap)
    try:
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), ADMIN_TIMEOUT_S)
                for p in range(partitions)}  # fmt: skip
    except KafkaException as exc:
        raise LogUnavailable(f"the Kafka log could not be measured: {exc.args[0].str()}") from None
    finally:
        consumer.close()


def log_ends(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    """Each partition's end: its next offset, where a frontier that reflects all of it is."""
    return {p: high for p, (_, high) in log_bounds(bootstrap, topic, partitions).items()}


def at_ends(frontier: Mapping[int, str], ends: Mapping[int, int]) -> bool:
    """Whether ``frontier`` (partition -> position) is at or past each of ``ends``."""
    return all(int(frontier.get(p, "0")) >= end for p, end in ends.items())


def measure_all(
    bootstrap: str,
    topic: str,
    partitions: int,
    frontiers: dict[str, dict[int, str]],
    now_ms: int | None = None,
) -> dict[str, Lag]:
    """The lag of each of ``frontiers`` (name -> partition -> position) now."""
    if not frontiers:
        return {}
    bounds = log_bounds(bootstrap, topic, partitions)
    starts = {
        name: {p: max(int(f[p]) if p in f else low, low)
               for p, (low, high) in bounds.items()}
        for name, f in frontiers.items()
    }  # fmt: skip
    wanted = {(p, at) for s in starts.values() for p, at in s.items() if at < bounds[p][1]}
    taken = _append_times(bootstrap, topic, wanted)
    now = now_ms if now_ms is not None else int(time.time() * 1000)
    out = {}
    for name, s in starts.items():
        # Only commit markers or aborted records past a position: nothing behind it. A query in
        # Real-Time Mode reports the offset after its last record, short of a trailing marker.
        behind = {p: at for p, at in s.items()
                  if at < bounds[p][1] and taken.get((p, at), -1) is not None}  # fmt: skip
        ages = [now - t for p, at in behind.items() if (t := taken.get((p, at))) is not None]
        out[name] = Lag(sum(bounds[p][1] - at for p, at in behind.items()), False,
                        max([0, *ages]))  # fmt: skip
    return out


def _append_times(
    bootstrap: str, topic: str, wanted: set[tuple[int, int]]
) -> dict[Any, int | None]:
    """When the broker took the first committed record at or after each (partition, offset);
    None for one with no committed record there (read to the partition's end), and nothing for
    one not read in time."""
    from confluent_kafka import KafkaError, TopicPartition

    found: dict[Any, int | None] = {}
    consumer = _consumer(bootstrap)
    try:
        # One offset per partition at a time: several frontiers on one partition take turns.
        todo = sorted(wanted)
        while todo:
            turn = dict(reversed(todo))  # partition -> one of its offsets
            todo = [w for w in todo if turn.get(w[0]) != w[1]]
            consumer.assign([TopicPartition(topic, p, at) for p, at in turn.items()])
            left, deadline = set(turn), time.monotonic() + READ_TIMEOUT_S
            while left and time.monotonic() < deadline:
                msg = consumer.poll(0.2)
                if msg is None:
                    continue
                p = msg.partition()
                if p not in left:
                    continue
                error = msg.error()
                if error is None:
                    found[(p, turn[p])] = msg.timestamp()[1]
                elif error.code() == KafkaError._PARTITION_EOF:
                    found[(p, turn[p])] = None
                else:
                    continue  # a transient error: polled again until the deadline
                left.discard(p)
            consumer.unassign()
    finally:
        consumer.close()
    return found
