"""Change data capture into a Kafka log, exactly once across a crash of the CDC process.

On a store, a transaction's events and the position they bring the capture to are one MULTI
(``liveviews.cdc.position``). On Kafka they are one Kafka transaction: the events go to the
log's topic and the position to ``<log topic>.cdc``, a compacted topic keyed by the slot, and a
reader of committed records (the pipelines, this process at its start) sees both or neither.
The producer's ``transactional.id`` is the slot's own, so a CDC process that starts again fences
the one before it: a transaction that one left open is aborted before the position is read,
and the position read is the last one committed with its events, as Kafka Connect's
exactly-once sources keep theirs.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import orjson

from liveviews.cdc.pgoutput import lsn_text, parse_lsn
from liveviews.cdc.position import Position
from liveviews.log.events import Event, partition_for
from liveviews.log.kafka.append import ACK_TIMEOUT_S, producer_config
from liveviews.log.kafka.appended import TRANSACTION_TIMEOUT_MS
from liveviews.log.kafka.clients import kafka_config, produce
from liveviews.log.kafka.records import record
from liveviews.log.kafka.topic import ADMIN_TIMEOUT_S, LogUnavailable, ensure_log_topic

POSITIONS_SUFFIX = ".cdc"


class KafkaPositions:
    """Appends a capture's transactions with its position to a Kafka log, and reads the
    position back."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, slot: str) -> None:
        from confluent_kafka import KafkaException, Producer
        from confluent_kafka.admin import AdminClient

        self.bootstrap, self.topic, self.partitions = bootstrap, topic, partitions
        self.positions_topic = topic + POSITIONS_SUFFIX
        admin = AdminClient(kafka_config(bootstrap))
        ensure_log_topic(admin, partitions, topic)
        ensure_log_topic(admin, 1, self.positions_topic, compacted=True)
        self.producer = Producer(producer_config(
            bootstrap, **{"transactional.id": f"liveviews-cdc-{topic}-{slot}",
                          "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS}))  # fmt: skip
        try:
            self.producer.init_transactions(ACK_TIMEOUT_S)
        except KafkaException as exc:
            raise LogUnavailable(f"the Kafka brokers at {bootstrap} did not start the capture's "
                                 f"producer ({exc.args[0].str()})") from None  # fmt: skip
        self.tables: tuple[str, ...] = ()

    def read(self, slot: str) -> Position | None:
        """The last position committed for ``slot``, if any."""
        from confluent_kafka import Consumer, KafkaError, TopicPartition

        consumer = Consumer(kafka_config(self.bootstrap, **{
            "group.id": "liveviews-cdc", "enable.auto.commit": False,
            "isolation.level": "read_committed", "enable.partition.eof": True}))  # fmt: skip
        found: bytes | None = None
        try:
            consumer.assign([TopicPartition(self.positions_topic, 0, 0)])
            deadline = time.monotonic() + ADMIN_TIMEOUT_S
            while True:
                if time.monotonic() > deadline:
                    raise LogUnavailable(f"the Kafka topic {self.positions_topic!r} could not "
                                         "be read to its end in time")  # fmt: skip
                msg = consumer.poll(0.5)
                if msg is None:
                    continue
                error = msg.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        break
                    if error.fatal():
                        raise LogUnavailable(f"the Kafka topic {self.positions_topic!r} could "
                                             f"not be read: {error.str()}")  # fmt: skip
                elif msg.key() == slot.encode():
                    found = msg.value()
        finally:
            consumer.close()
        if not found:
            return None
        stored = orjson.loads(found)
        position = Position(parse_lsn(stored["lsn"]), tuple(sorted(stored["tables"])))
        self.tables = position.tables
        return position

    def append_at(
        self, slot: str, events: Sequence[Event], lsn: int, tables: Sequence[str] | None = None
    ) -> None:
        """Append ``events`` and record ``lsn`` (and, for a snapshot, ``tables``), in one
        Kafka transaction."""
        from confluent_kafka import KafkaException

        if tables is not None:
            self.tables = tuple(sorted(tables))
        p = self.producer
        position = orjson.dumps({"lsn": lsn_text(lsn), "tables": list(self.tables)})
        try:
            p.begin_transaction()
            for event in events:
                k, v, headers = record(event)
                # A snapshot can be larger than the producer's queue: wait for it to drain.
                produce(p, self.topic, v, k, partition_for(event.key, self.partitions), headers,
                        wait_when_full=True)  # fmt: skip
            produce(p, self.positions_topic, position, slot.encode(), 0, None, wait_when_full=True)
            p.commit_transaction(ACK_TIMEOUT_S)
        except KafkaException as exc:
            # Whatever its state, the transaction is settled by the producer of the process
            # that starts next (fencing), before it reads the position: so stop here.
            raise LogUnavailable(f"the Kafka log did not take the capture's transaction "
                                 f"({exc.args[0].str()})") from None  # fmt: skip

    def close(self) -> None:
        self.producer.flush(ACK_TIMEOUT_S)
        self.producer.close()
