"""The store's record of a batch appended to a Kafka log under an idempotency key.

Kafka does not keep the answer to a batch whose writer lost it (a timeout, a crash), so under
an idempotency key the store keeps a record of the batch (``lv:kafka:appended:<key>``), as
``append.lua`` does on Redis Streams:

- before the batch, ``<digest> pending <store ms>``, set only if there is no record, in one
  round trip on the store's clock (``claim.lua``); a record of another digest refuses the key,
  a ``done`` one answers its offsets and appends nothing;
- after Kafka acknowledged it, ``<digest> done <offsets>``;
- a ``pending`` record is a batch in flight: a retry waits for it. Once it is older than the
  producer's transaction timeout (the brokers abort a transaction left open that long) plus a
  grace, its writer is gone, and the batch's records, which carry the key in a header, are
  looked for in the log from the record's time on: found, they are its answer; not found, the
  retry appends the batch itself.

That is exact unless a writer stalls between its record and Kafka's acknowledgement for longer
than the transaction timeout and the grace together (``TRANSACTION_TIMEOUT_MS``, ``GRACE_MS``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from liveviews.log.append import Idempotency, key_reused
from liveviews.log.events import Event, Offset, partition_for
from liveviews.log.kafka.clients import kafka_config
from liveviews.log.kafka.records import HEADER_IDEMPOTENCY, header, offset_of
from liveviews.log.kafka.topic import LogUnavailable
from liveviews.store.client import Client

TRANSACTION_TIMEOUT_MS = 10_000
"""The writers' transaction timeout: the brokers abort a transaction left open this long."""
GRACE_MS = 5_000
RECORD_PREFIX = "lv:kafka:appended:"
DONE = "done"
CLAIM_SCRIPT = Path(__file__).with_name("claim.lua").read_text()


class AppendedBatches:
    """The records of the batches appended under idempotency keys to ``topic``, in ``store``."""

    def __init__(
        self, store: Client, bootstrap: str, topic: str, partitions: int, timeout: float
    ) -> None:
        self.store, self.bootstrap, self.topic = store, bootstrap, topic
        self.partitions, self.timeout = partitions, timeout
        self.script = store.register_script(CLAIM_SCRIPT)

    def claim(self, events: Sequence[Event], idempotency: Idempotency) -> list[Offset] | None:
        """None once this writer holds the batch's record; the batch's offsets if it was
        appended already."""
        name = RECORD_PREFIX + idempotency.key
        deadline = time.monotonic() + (TRANSACTION_TIMEOUT_MS + 2 * GRACE_MS) / 1000
        while True:
            # One round trip: the record set if there was none, on the store's clock.
            now_text, *held = self.script(keys=[name], args=[idempotency.digest,
                                                             idempotency.seconds])  # fmt: skip
            if not held:
                return None
            now, raw = int(now_text), held[0]
            digest, state, rest = raw.decode().split("\n", 2)
            if digest != idempotency.digest:
                raise key_reused()
            if state == DONE:
                return _offsets(rest)
            if now - int(rest) > TRANSACTION_TIMEOUT_MS + GRACE_MS:
                found = self._find(idempotency.key, int(rest), events)
                if found is not None:
                    self.done(idempotency, found)
                    return found
                if self._take_over(name, raw, idempotency):
                    return None
            elif time.monotonic() > deadline:
                raise LogUnavailable(
                    "another request with this Idempotency-Key is still being appended; send "
                    "it again in a few seconds."
                )
            time.sleep(0.05)

    def done(self, idempotency: Idempotency, offsets: Sequence[Offset]) -> None:
        """Record the batch as appended at ``offsets``: a retry is answered them."""
        self.store.set(RECORD_PREFIX + idempotency.key, done_record(idempotency.digest, offsets),
                       ex=idempotency.seconds)  # fmt: skip

    def release(self, idempotency: Idempotency) -> None:
        """Drop the record of a batch none of which was appended: a retry may go on."""
        self.store.delete(RECORD_PREFIX + idempotency.key)

    def _take_over(self, name: str, seen: bytes, idempotency: Idempotency) -> bool:
        """Replace the record ``seen`` by this writer's, unless another writer changed it
        first (``claim.lua``)."""
        _, *held = self.script(keys=[name], args=[idempotency.digest, idempotency.seconds, seen])
        return not held

    def _find(self, key: str, since_ms: int, events: Sequence[Event]) -> list[Offset] | None:
        """The offsets of the batch's records if they are in the log (committed), else None."""
        from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

        by_partition: dict[int, list[int]] = {}
        for i, event in enumerate(events):
            by_partition.setdefault(partition_for(event.key, self.partitions), []).append(i)
        consumer = Consumer(kafka_config(self.bootstrap, **{
            "group.id": "liveviews-find", "enable.auto.commit": False,
            "isolation.level": "read_committed", "enable.partition.eof": True}))  # fmt: skip
        try:
            found: dict[int, list[int]] = {}
            starts = consumer.offsets_for_times(
                [TopicPartition(self.topic, p, since_ms - GRACE_MS) for p in by_partition],
                self.timeout)  # fmt: skip
            todo = []
            for tp in starts:
                _, high = consumer.get_watermark_offsets(tp, self.timeout)
                if 0 <= tp.offset < high:
                    todo.append(TopicPartition(self.topic, tp.partition, tp.offset))
            consumer.assign(todo)
            left = {tp.partition for tp in todo}
            deadline = time.monotonic() + self.timeout
            while left and time.monotonic() < deadline:
                msg = consumer.poll(0.5)
                if msg is None:
                    continue
                partition, at, error = msg.partition(), msg.offset(), msg.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        left.discard(partition)  # its end: every committed record read
                    elif error.fatal():
                        break  # answered below; others (a lost connection) are retried
                elif header(msg.headers(), HEADER_IDEMPOTENCY) == key.encode():
                    assert partition is not None and at is not None  # a record has both
                    found.setdefault(partition, []).append(at)
            if left:
                raise _unsettled("not every partition was read to its end")
        except KafkaException as exc:  # the brokers are away: the record stays pending
            raise _unsettled(exc.args[0].str()) from None
        finally:
            consumer.close()
        if not found:
            return None
        offsets: list[Offset | None] = [None] * len(events)
        for partition, indexes in by_partition.items():
            for i, at in zip(indexes, found.get(partition, []), strict=False):
                offsets[i] = offset_of(partition, at)
        if None in offsets:  # a transaction is whole or absent: this cannot be a batch of ours
            raise key_reused()
        return [o for o in offsets if o is not None]


def _unsettled(why: str) -> LogUnavailable:
    return LogUnavailable(f"the Kafka log could not be read to settle an earlier append ({why}); "
                          "send the same batch again.")  # fmt: skip


def done_record(digest: str, offsets: Sequence[Offset]) -> str:
    """The record of a batch appended at ``offsets``."""
    return f"{digest}\n{DONE}\n" + " ".join(str(o) for o in offsets)


def _offsets(text: str) -> list[Offset]:
    return [Offset.parse(token) for token in text.split()]
