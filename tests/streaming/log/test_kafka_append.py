"""Appending to a Kafka log (``liveviews.log.kafka.append``) against a real broker: a batch
whole or not at all, once per idempotency key, and the answer of a batch whose writer lost it
found in the log."""

from __future__ import annotations

import dataclasses
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import redis
from confluent_kafka import KafkaError, KafkaException

from demo.chirp import app as chirp
from liveviews.errors import InvalidEvent, StoreMismatch
from liveviews.log.append import Idempotency, IdempotencyKeyReused
from liveviews.log.eventlog import store_time_ms
from liveviews.log.events import LoggedEvent, Offset
from liveviews.log.kafka import append as kafka_append
from liveviews.log.kafka import appended as kafka_appended
from liveviews.log.kafka.append import KafkaEventLog, NotAppended
from liveviews.log.kafka.appended import RECORD_PREFIX
from liveviews.log.kafka.records import decode_record, kafka_offset, record
from liveviews.log.kafka.topic import LogUnavailable
from liveviews.log.opened import log_writer
from liveviews.pipeline.settings import Settings
from tests.support.gateway import free_port
from tests.support.kafkalog import PARTITIONS, read_kafka_log


def rename(user: str, name: str) -> dict[str, Any]:
    return {"type": "profile_set", "payload": {"user": user, "name": name}}


def read_log(log: KafkaEventLog, count: int) -> list[LoggedEvent]:
    """The log's committed events, in partition and offset order, once there are ``count``."""
    return [e for part in read_kafka_log(log.bootstrap, log.topic, PARTITIONS, count) for e in part]


def test_a_batch_is_appended_across_partitions_and_read_back_at_its_offsets(
    log: KafkaEventLog,
) -> None:
    batch = [rename(f"u{i}", f"name {i}") for i in range(12)]
    offsets = log.append_batch(batch)
    assert len(offsets) == 12 and len({o.partition for o in offsets}) > 1
    events = {e.offset: e for e in read_log(log, 12)}
    assert set(events) == set(offsets)
    for raw, offset in zip(batch, offsets, strict=True):
        event = events[offset]
        assert (event.type, event.key, event.payload) == ("profile_set", raw["payload"]["user"],
                                                         raw["payload"])  # fmt: skip
        assert int(offset.id) >= 1  # a position is the offset after the record
        assert abs(event.ingest_ms - event.time_ms) < 60_000  # the broker's clock
    single = log.append(rename("u1", "again"))
    assert single.partition == offsets[1].partition and int(single.id) > int(offsets[1].id)


def test_threads_appending_at_once_each_get_their_own_events_offsets(log: KafkaEventLog) -> None:
    """Each waits for its own acknowledgement, not for every event in flight."""
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda i: (i, log.append(rename(f"u{i % 5}", f"n{i}"))),
                                range(200)))  # fmt: skip
    assert len({o for _, o in answers}) == 200
    events = {e.offset: e for e in read_log(log, 200)}
    assert all(events[o].payload["name"] == f"n{i}" for i, o in answers)


def test_an_invalid_event_appends_nothing_of_its_batch(log: KafkaEventLog) -> None:
    log.append(rename("u0", "first"))
    with pytest.raises(InvalidEvent):
        log.append_batch([rename("u1", "ok"), {"type": "profile_set", "payload": {"user": 3}}])
    assert [e.payload["name"] for e in read_log(log, 1)] == ["first"]


def test_a_key_sent_again_answers_the_same_offsets_and_appends_nothing(
    log: KafkaEventLog,
) -> None:
    batch = [rename("u1", "a"), rename("u2", "b"), rename("u3", "c")]
    first = log.append_batch(batch, idempotency_key="k-1")
    assert log.append_batch(batch, idempotency_key="k-1") == first
    one = log.append(rename("u4", "d"), idempotency_key="k-2")
    assert log.append(rename("u4", "d"), idempotency_key="k-2") == one
    with pytest.raises(IdempotencyKeyReused):
        log.append_batch([rename("u9", "other")], idempotency_key="k-1")
    assert len(read_log(log, 4)) == 4


def test_a_batch_whose_answer_was_lost_is_found_in_the_log_not_appended_again(
    log: KafkaEventLog, store: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer that died after Kafka took its batch left its record ``pending``: once that is
    older than a transaction can stay open, a retry finds the batch by its key's header."""
    monkeypatch.setattr(kafka_appended, "TRANSACTION_TIMEOUT_MS", 0)
    monkeypatch.setattr(kafka_appended, "GRACE_MS", 200)
    batch = [rename("u1", "a"), rename("u2", "b"), rename("u5", "c")]
    idem = Idempotency.of(batch, "lost-1")
    events = chirp.validate_batch(batch)
    # What the dead writer did: its record, then its batch, and no answer recorded.
    store.set(RECORD_PREFIX + "lost-1", f"{idem.digest}\npending\n{store_time_ms(store)}")
    appended = log.produce(events, "lost-1")
    store.set(RECORD_PREFIX + "lost-1",
              f"{idem.digest}\npending\n{store_time_ms(store) - 1_000}")  # fmt: skip
    assert log.append_batch(batch, idempotency_key="lost-1") == appended
    assert len(read_log(log, 3)) == 3
    assert log.append_batch(batch, idempotency_key="lost-1") == appended  # now recorded done


def test_a_batch_whose_writer_died_before_kafka_took_it_is_appended_by_the_retry(
    log: KafkaEventLog, store: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(kafka_appended, "TRANSACTION_TIMEOUT_MS", 0)
    monkeypatch.setattr(kafka_appended, "GRACE_MS", 200)
    batch = [rename("u1", "a"), rename("u2", "b")]
    idem = Idempotency.of(batch, "lost-2")
    log.append(rename("u7", "before"))  # another writer's event, without the key
    store.set(RECORD_PREFIX + "lost-2",
              f"{idem.digest}\npending\n{store_time_ms(store) - 1_000}")  # fmt: skip
    offsets = log.append_batch(batch, idempotency_key="lost-2")
    assert [e.offset for e in read_log(log, 3) if e.key != "u7"] == sorted(
        offsets, key=lambda o: (o.partition, int(o.id)))  # fmt: skip
    assert log.append_batch(batch, idempotency_key="lost-2") == offsets


def test_a_retry_that_cannot_reach_the_brokers_to_settle_a_batch_is_a_log_unavailable(
    log: KafkaEventLog, store: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lost batch's offsets are looked for with brokers that do not answer (an address
    where none listens): the retry is refused as the log being away, the record stays pending,
    and a retry once they answer appends the batch once."""
    monkeypatch.setattr(kafka_appended, "TRANSACTION_TIMEOUT_MS", 0)
    monkeypatch.setattr(kafka_appended, "GRACE_MS", 200)
    batch = [rename("u1", "a"), rename("u2", "b")]
    idem = Idempotency.of(batch, "lost-3")
    record = f"{idem.digest}\npending\n{store_time_ms(store) - 1_000}"
    store.set(RECORD_PREFIX + "lost-3", record)
    with monkeypatch.context() as away:
        away.setattr(log.records, "bootstrap", f"127.0.0.1:{free_port()}")
        away.setattr(log.records, "timeout", 2.0)
        with pytest.raises(LogUnavailable, match="could not be read to settle an earlier append"):
            log.append_batch(batch, idempotency_key="lost-3")
    assert store.get(RECORD_PREFIX + "lost-3") == record.encode()
    offsets = log.append_batch(batch, idempotency_key="lost-3")
    assert [e.offset for e in read_log(log, 2)] == sorted(
        offsets, key=lambda o: (o.partition, int(o.id)))  # fmt: skip


class Faulty:
    """The writer's transactional producer, with one fault forced where its calls fail: the
    protocol's edge (librdkafka's answers), the broker itself real."""

    def __init__(self, producer: Any, *, commit: KafkaError | None = None,
                 produce_fails_at: int | None = None) -> None:  # fmt: skip
        self.producer, self.commit, self.produce_fails_at, self.produced = (
            producer, commit, produce_fails_at, 0)  # fmt: skip
        self.transactions = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.producer, name)

    def begin_transaction(self) -> None:
        self.transactions += 1
        self.producer.begin_transaction()

    def produce(self, *args: Any, **kwargs: Any) -> None:
        self.produced += 1
        if self.produced == self.produce_fails_at:
            raise BufferError("Local: Queue full")
        self.producer.produce(*args, **kwargs)

    def commit_transaction(self, *args: Any) -> None:
        fault, self.commit = self.commit, None
        if fault is not None:
            raise KafkaException(fault)
        self.producer.commit_transaction(*args)


def names(log: KafkaEventLog, count: int) -> list[str]:
    return sorted(e.payload["name"] for e in read_log(log, count))


def test_a_commit_that_fails_and_may_be_retried_is_retried_and_appends_once(
    log: KafkaEventLog,
) -> None:
    log.batches = Faulty(log.batches, commit=KafkaError(KafkaError._TIMED_OUT, "injected",
                                                        retriable=True))  # fmt: skip
    log.append_batch([rename("u1", "a"), rename("u2", "b")])
    log.append_batch([rename("u3", "c"), rename("u4", "d")])
    assert names(log, 4) == ["a", "b", "c", "d"]


def test_a_full_producer_queue_aborts_the_batch_and_the_next_one_is_appended(
    log: KafkaEventLog,
) -> None:
    log.batches = Faulty(log.batches, produce_fails_at=2)
    with pytest.raises(NotAppended) as caught:
        log.append_batch([rename("u1", "a"), rename("u2", "b"), rename("u3", "c")])
    assert "nothing was appended" in caught.value.message
    log.append_batch([rename("u4", "d"), rename("u5", "e")])
    assert names(log, 2) == ["d", "e"]


def test_a_commit_whose_outcome_is_unknown_replaces_the_producer(log: KafkaEventLog) -> None:
    """A fatal error leaves the producer unusable and the batch's fate unknown: the answer says
    to retry under the key, and the producer that replaces it settles the transaction (here,
    never committed: aborted) before the next batch."""
    log.batches = Faulty(log.batches, commit=KafkaError(KafkaError._FATAL, "injected",
                                                        fatal=True))  # fmt: skip
    with pytest.raises(LogUnavailable) as caught:
        log.append_batch([rename("u1", "a"), rename("u2", "b")])
    assert not isinstance(caught.value, NotAppended)
    assert "same Idempotency-Key" in caught.value.message
    log.append_batch([rename("u3", "c"), rename("u4", "d")])
    assert names(log, 2) == ["c", "d"]


def test_a_batch_waiting_behind_another_is_answered_by_its_deadline(
    log: KafkaEventLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While the brokers are away every batch ahead holds the writer for its own timeouts; the
    batch behind them is answered by its deadline, as not appended, rather than after theirs."""
    monkeypatch.setattr(kafka_append, "ACK_TIMEOUT_S", 0.5)
    with log.lock, pytest.raises(NotAppended) as caught:  # a batch ahead, waiting on brokers
        log.append_batch([rename("u1", "a"), rename("u2", "b")])
    assert "within 0.5 s" in caught.value.message and "Nothing was appended" in caught.value.message
    monkeypatch.undo()
    log.append_batch([rename("u3", "c"), rename("u4", "d")])
    assert names(log, 2) == ["c", "d"]


def waiting_together(log: KafkaEventLog, batches: list[list[dict[str, Any]]]) -> list[Any]:
    """Each batch appended by a thread of its own, all of them queued behind a transaction
    under way before the first of them goes: their answers (offsets, or the error raised)."""

    def append(batch: list[dict[str, Any]]) -> Any:
        try:
            return log.append_batch(batch)
        except LogUnavailable as exc:
            return exc

    with ThreadPoolExecutor(len(batches)) as pool:
        with log.lock:  # a transaction under way
            answers = [pool.submit(append, b) for b in batches]
            deadline = time.monotonic() + 30
            while len(log.queue) < len(batches) and time.monotonic() < deadline:
                time.sleep(0.01)
            assert len(log.queue) == len(batches)
        return [a.result() for a in answers]


def test_batches_waiting_together_share_one_transaction_each_whole(log: KafkaEventLog) -> None:
    """Group commit: the batches waiting for the producer go in its next transaction, and
    each gets its own events' offsets."""
    log.batches = counting = Faulty(log.batches)
    batches = [[rename(f"u{i}", f"n{i}.{j}") for j in range(3)] for i in range(20)]
    answers = waiting_together(log, batches)
    assert counting.transactions == 1
    events = {e.offset: e for e in read_log(log, 60)}
    for batch, offsets in zip(batches, answers, strict=True):
        assert [events[o].payload for o in offsets] == [e["payload"] for e in batch]


def test_a_shared_transaction_that_fails_answers_each_of_its_batches(log: KafkaEventLog) -> None:
    """None of them was appended, and each thread is told so; the next batch goes on."""
    log.batches = Faulty(log.batches, produce_fails_at=4)
    answers = waiting_together(log, [[rename("u1", "a"), rename("u2", "b")],
                                     [rename("u3", "c"), rename("u4", "d")],
                                     [rename("u5", "e"), rename("u6", "f")]])  # fmt: skip
    assert all(isinstance(a, NotAppended) for a in answers)
    assert len({id(a) for a in answers}) == 3  # each thread raised its own
    log.append_batch([rename("u7", "g"), rename("u8", "h")])
    assert names(log, 2) == ["g", "h"]


def test_a_topic_with_another_partition_count_is_refused_with_a_sentence(
    log: KafkaEventLog, store: redis.Redis
) -> None:
    with pytest.raises(StoreMismatch) as caught:
        KafkaEventLog(log.bootstrap, chirp, PARTITIONS + 1, store, topic=log.topic)
    assert f"has {PARTITIONS} partitions" in caught.value.message
    assert "LV_LOG_PARTITIONS=5" in caught.value.message


def test_a_record_holds_the_event_as_the_entry_does() -> None:
    (event,) = chirp.validate_batch([rename("amy", "Amy")])
    key, value, headers = record(event, "k")
    back = decode_record(3, 41, key, value, headers, 1_700_000_000_000)
    assert back.offset == Offset(3, "42") and kafka_offset(back.id) == 41
    assert (back.type, back.key, back.payload, back.time_ms) == (
        event.type, event.key, event.payload, event.time_ms)  # fmt: skip
    assert back.ingest_ms == 1_700_000_000_000
    assert ("idempotency_key", b"k") in headers


def test_a_log_is_empty_until_its_first_event_on_either_writer(
    log: KafkaEventLog, store: redis.Redis, settings: Settings
) -> None:
    on_kafka = dataclasses.replace(settings, kafka=log.bootstrap, kafka_topic=log.topic)
    for writer in (log_writer(on_kafka, chirp, store), log_writer(settings, chirp, store)):
        assert writer.empty()
        writer.append(rename("u1", "first"))
        assert not writer.empty()
        writer.close()
    chosen = log_writer(on_kafka, chirp, store)
    assert isinstance(chosen, KafkaEventLog)
    chosen.close()


def test_librdkafka_s_lines_go_to_logging_at_debug_level_but_its_critical_ones(
    caplog: pytest.LogCaptureFixture,
) -> None:
    import logging

    from liveviews.log.kafka.clients import LIBRDKAFKA

    with caplog.at_level(logging.DEBUG, logger="liveviews.kafka"):
        LIBRDKAFKA.log(logging.WARNING, "%s: %s", "GETPID", "Coordinator load in progress")
        LIBRDKAFKA.log(logging.CRITICAL, "%s", "fatal")
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (logging.DEBUG, "GETPID: Coordinator load in progress"), (logging.ERROR, "fatal")]  # fmt: skip
