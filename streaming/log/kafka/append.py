"""Appending a batch of events to a Kafka log once, whatever is retried.

Kafka's idempotent producer (``acks=all``) makes a writer's own retries append nothing twice;
a batch of several events goes into one Kafka transaction, so it is appended whole or not at
all, on every partition it touches, as one MULTI is on a single Redis server. Batches that wait
for the writer's transactional producer at the same moment share its next transaction (group
commit): each is still whole or absent, and they are answered together. What Kafka does not keep
is the answer to a batch whose writer lost it (a timeout, a crash): under an idempotency key,
the store keeps a record of the batch (``liveviews.log.kafka.appended``), as ``append.lua`` does
on Redis Streams.
"""

from __future__ import annotations

import copy
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from liveviews.app import App
from liveviews.log.append import Idempotency
from liveviews.log.events import Event, Offset, partition_for
from liveviews.log.kafka.appended import TRANSACTION_TIMEOUT_MS, AppendedBatches
from liveviews.log.kafka.clients import kafka_config, produce
from liveviews.log.kafka.records import offset_of, record
from liveviews.log.kafka.topic import LOG_TOPIC, LogUnavailable, ensure_log_topic
from liveviews.log.writer import LogWriter
from liveviews.store.client import Client

ACK_TIMEOUT_S = 30.0
GROUP_EVENTS = 5_000
"""The most events batches sharing one transaction add up to (a larger batch goes alone)."""
ABORT_TIMEOUT_S = 2.0
"""The least an abort past a batch's deadline waits: one that does not end in time leaves the
producer to its successor, which aborts the transaction as it starts (fencing)."""


def producer_config(bootstrap: str, **extra: Any) -> dict[str, Any]:
    return kafka_config(
        bootstrap,
        **{
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 0,
            "message.timeout.ms": TRANSACTION_TIMEOUT_MS,
            **extra,
        },
    )


@dataclass(eq=False)
class Turn:
    """A batch of several events waiting for, then in, a transaction; its thread waits for
    ``answered``."""

    events: Sequence[Event]
    key: str | None
    deadline: float
    """monotonic"""
    offsets: list[Offset | None] = field(init=False)
    error: Exception | None = None
    answered: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self.offsets = [None] * len(self.events)


class KafkaEventLog(LogWriter):
    """Synchronous writer of an application's events to a Kafka log: ``EventLog``'s interface
    (``append``, ``append_batch``, ``append_validated``), its promises and its answers."""

    def __init__(
        self,
        bootstrap: str,
        app: App,
        partitions: int,
        store: Client,
        *,
        topic: str = LOG_TOPIC,
    ) -> None:
        from confluent_kafka import Producer
        from confluent_kafka.admin import AdminClient

        self.bootstrap, self.app, self.partitions = bootstrap, app, partitions
        self.topic = topic
        admin = AdminClient(kafka_config(bootstrap))
        ensure_log_topic(admin, partitions, topic)
        self.single = Producer(producer_config(bootstrap))
        self.records = AppendedBatches(store, bootstrap, topic, partitions, ACK_TIMEOUT_S)
        # One transaction at a time per producer. Batches of several events that wait for it
        # share the next one (group commit): a transaction costs the brokers several round
        # trips, and taking turns one batch each held the gateway to ~50 batches a second
        # while Spark started on 2 cores (docs/performance/kafka.md).
        self.transactional_id = f"liveviews-{uuid.uuid4().hex}"
        self.batches: Any | None = self._transactional()
        self.lock = threading.Lock()
        """Held by the thread whose transaction is under way."""
        self.turns = threading.Lock()
        self.queue: list[Turn] = []
        """The batches waiting for a transaction, oldest first (under ``turns``)."""
        # Single events are appended by any number of threads at once, each waiting for its
        # own acknowledgement, which this thread hands over (librdkafka runs callbacks in poll).
        self.closed = threading.Event()
        self.poller = threading.Thread(target=self._poll, name="liveviews-kafka-acks", daemon=True)
        self.poller.start()

    def _transactional(self, timeout: float = ACK_TIMEOUT_S) -> Any:
        """A producer of transactions under this writer's id. Starting one fences any earlier
        producer of the id and settles the transaction it left (committed if its commit had
        begun, else aborted), so batches after it start from a known state."""
        from confluent_kafka import KafkaException, Producer

        producer = Producer(producer_config(
            self.bootstrap, **{"transactional.id": self.transactional_id,
                               "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS}))  # fmt: skip
        try:
            producer.init_transactions(timeout)
        except KafkaException as exc:
            raise LogUnavailable(
                f"the Kafka brokers at {self.bootstrap} did not start a transactional producer "
                f"({exc.args[0].str()}); check that they run and that this process may write."
            ) from None
        return producer

    def _poll(self) -> None:
        while not self.closed.is_set():
            self.single.poll(0.05)

    def empty(self) -> bool:
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer(kafka_config(self.bootstrap, **{"group.id": "liveviews-ends"}))
        try:
            return all(
                consumer.get_watermark_offsets(TopicPartition(self.topic, p), ACK_TIMEOUT_S)[1] == 0
                for p in range(self.partitions)
            )
        finally:
            consumer.close()

    def close(self) -> None:
        self.closed.set()
        self.poller.join()
        # Flushed first, with a bound: close() alone waits for every message however long.
        self.single.flush(ACK_TIMEOUT_S)
        self.single.close()
        if self.batches is not None:
            self.batches.flush(ACK_TIMEOUT_S)
            self.batches.close()

    def append_validated(
        self, events: Sequence[Event], idempotency: Idempotency | None = None
    ) -> list[Offset]:
        if not events:
            return []
        key = idempotency.key if idempotency is not None and idempotency.given else None
        if key is None or idempotency is None:
            return self.produce(events, None)
        done = self.records.claim(events, idempotency)
        if done is not None:
            return done
        try:
            offsets = self.produce(events, key)
        except NotAppended:
            self.records.release(idempotency)  # nothing was appended: a retry may go on
            raise
        self.records.done(idempotency, offsets)
        return offsets

    # Appending

    def produce(self, events: Sequence[Event], key: str | None) -> list[Offset]:
        """Append ``events``, carrying the idempotency ``key`` if given, without its record."""
        if len(events) == 1:
            answers: list[tuple[Offset | None, LogUnavailable | None]] = []
            answered = threading.Event()

            def report(offset: Offset | None, error: LogUnavailable | None) -> None:
                answers.append((offset, error))
                answered.set()

            self.send_one(events[0], key, report)
            if not answered.wait(ACK_TIMEOUT_S):
                raise unconfirmed("no acknowledgement in time")
            offset, error = answers[0]
            if error is not None:
                raise error
            assert offset is not None
            return [offset]
        turn = Turn(events, key, time.monotonic() + ACK_TIMEOUT_S)
        with self.turns:
            self.queue.append(turn)
        while not turn.answered.is_set():
            # One deadline for the batch, its wait for the batches before it included: while
            # the brokers are away each would otherwise hold the next for up to three timeouts.
            left = turn.deadline - time.monotonic()
            if left > 0 and self.lock.acquire(timeout=left):
                try:
                    if not turn.answered.is_set():
                        self._commit_turns(self._take_turns())
                finally:
                    self.lock.release()
                continue
            with self.turns:
                if turn in self.queue:  # no transaction took it: it can still give up
                    self.queue.remove(turn)
                    raise NotAppended(
                        f"the Kafka log did not take the batch within {ACK_TIMEOUT_S:g} s: the "
                        "batches before it are still waiting for the brokers. Nothing was "
                        "appended; send it again."
                    )
            turn.answered.wait()  # in a transaction under way, which ends by its deadline
        if turn.error is not None:
            raise copy.copy(turn.error)  # each thread raises its own: tracebacks differ
        return [o for o in turn.offsets if o is not None]

    def _take_turns(self) -> list[Turn]:
        """The batches waiting for a transaction, oldest first, up to ``GROUP_EVENTS`` events
        (the first batch whatever its size); those whose deadline has passed are left to give
        up."""
        now = time.monotonic()
        taken: list[Turn] = []
        events = 0
        with self.turns:
            for turn in list(self.queue):
                if taken and events + len(turn.events) > GROUP_EVENTS:
                    break
                if turn.deadline > now:
                    self.queue.remove(turn)
                    taken.append(turn)
                    events += len(turn.events)
        return taken

    def _commit_turns(self, turns: list[Turn]) -> None:
        """Appends the batches of ``turns`` in one transaction and answers each: all of them
        are appended, or none."""
        if not turns:
            return
        try:
            self._transaction(turns, min(t.deadline for t in turns))
        except Exception as exc:  # LogUnavailable, or whatever else fails the transaction
            for turn in turns:
                turn.error = exc
        finally:
            for turn in turns:
                turn.answered.set()

    def send_one(self, event: Event, key: str | None, report: Report) -> None:
        """Sends ``event`` through the idempotent producer without waiting: ``report`` is called
        once, from the poll thread, with its offset or the error its append ends in. The
        gateway's event loop waits for it on a future; ``append`` on a thread."""
        from confluent_kafka import KafkaException

        def delivered(err: Any, msg: Any) -> None:
            if err is None:
                report(offset_of(msg.partition(), msg.offset()), None)
            elif refused(err):
                report(None, NotAppended.of(err))
            else:
                # It may be in the log (a timeout after it was sent): a retry under the same
                # idempotency key finds out.
                report(None, unconfirmed(err.str()))

        k, v, headers = record(event, key)
        partition = partition_for(event.key, self.partitions)
        try:
            self.single.produce(self.topic, v, k, partition=partition, headers=headers,
                                on_delivery=delivered)  # fmt: skip
        except (BufferError, KafkaException) as exc:
            raise NotAppended.of(exc) from None

    def _transaction(self, turns: Sequence[Turn], deadline: float) -> None:
        """Appends the batches of ``turns`` in one transaction by ``deadline`` (monotonic),
        each record's offset into its turn, following the
        producer's error rules: a retriable error is retried, one that requires an abort
        aborts (nothing appended), and any other leaves the producer unusable, so it is
        replaced before the next batch."""
        from confluent_kafka import KafkaException

        def left() -> float:
            return max(deadline - time.monotonic(), 0.1)

        try:
            if self.batches is None:
                self.batches = self._transactional(left())
        except LogUnavailable as exc:
            raise NotAppended(exc.message + " Nothing was appended.") from None
        p = self.batches
        try:
            p.begin_transaction()
            try:
                for turn in turns:
                    self._send(p, turn)
            except BufferError as exc:  # the producer's queue is full: give up this batch
                p.abort_transaction(max(left(), ABORT_TIMEOUT_S))
                raise NotAppended.of(exc) from None
            while True:
                try:
                    p.commit_transaction(left())
                    return
                except KafkaException as exc:
                    if not (exc.args[0].retriable() and time.monotonic() < deadline):
                        raise
        except KafkaException as exc:
            error = exc.args[0]
            if error.txn_requires_abort():
                try:
                    p.abort_transaction(max(left(), ABORT_TIMEOUT_S))
                except KafkaException:
                    self.batches = None  # its successor aborts the transaction (fencing)
                raise NotAppended.of(error) from None
            # The commit's outcome is unknown: the batch may be in the log. The producer's
            # successor settles it before the next batch; a retry under the same idempotency
            # key finds out which (the module's docstring).
            self.batches = None
            raise LogUnavailable(
                f"the Kafka log did not confirm the batch ({error.str()}); send the same batch "
                "again with the same Idempotency-Key: nothing is appended twice."
            ) from None

    def _send(self, producer: Any, turn: Turn) -> None:
        def delivered(i: int) -> Any:
            # A record that fails fails the transaction's commit, which ``_transaction`` answers.
            def report(err: Any, msg: Any) -> None:
                if err is None:
                    turn.offsets[i] = offset_of(msg.partition(), msg.offset())

            return report

        for i, event in enumerate(turn.events):
            k, v, headers = record(event, turn.key)
            produce(producer, self.topic, v, k, partition_for(event.key, self.partitions), headers,
                    delivered(i), wait_when_full=False)  # fmt: skip


Report = Callable[[Offset | None, "LogUnavailable | None"], None]
"""What becomes of one event's append: its offset, or the error to answer."""


def unconfirmed(reason: str) -> LogUnavailable:
    return LogUnavailable(
        f"the Kafka log did not confirm the event ({reason}); send it again with the same "
        "Idempotency-Key: nothing is appended twice."
    )


def refused(error: Any) -> bool:
    """Whether Kafka refused an event outright (it was not written), rather than leaving its
    outcome unknown (a timeout after it was sent)."""
    from confluent_kafka import KafkaError

    return error.code() in {
        KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.INVALID_MSG_SIZE,
        KafkaError.RECORD_LIST_TOO_LARGE, KafkaError.INVALID_RECORD,
        KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError._UNKNOWN_TOPIC, KafkaError._UNKNOWN_PARTITION,
    }  # fmt: skip


class NotAppended(LogUnavailable):
    """Kafka refused or timed out the batch, and none of it was appended."""

    @classmethod
    def of(cls, error: Any) -> NotAppended:
        text = error.str() if hasattr(error, "str") else str(error)
        return cls(f"the Kafka log did not take the batch ({text}); nothing was appended. Send "
                   "it again.")  # fmt: skip
