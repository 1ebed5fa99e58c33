"""The lag of frontiers behind a Kafka log (``liveviews.log.kafka.lag``) against a real broker:
events behind exact, time as the age of the oldest event not reflected."""

from __future__ import annotations

from liveviews.changes.lag import Lag
from liveviews.log.kafka.append import KafkaEventLog
from liveviews.log.kafka.lag import log_ends, measure_all
from tests.support.kafkalog import PARTITIONS, read_kafka_log


def test_frontiers_behind_a_kafka_log_count_its_events_and_the_oldest_unread_one_s_age(
    log: KafkaEventLog,
) -> None:
    # Single events: no transaction, so no commit marker takes an offset.
    offsets = [log.append({"type": "profile_set", "payload": {"user": f"u{i}", "name": "n"}})
               for i in range(12)]  # fmt: skip
    events = {e.offset: e for part in read_kafka_log(log.bootstrap, log.topic, PARTITIONS, 12)
              for e in part}  # fmt: skip
    ends = log_ends(log.bootstrap, log.topic, PARTITIONS)
    assert sum(ends.values()) == 12
    first = min(e.ingest_ms for e in events.values())
    now = max(e.ingest_ms for e in events.values()) + 1_000
    one = offsets[0]
    lags = measure_all(log.bootstrap, log.topic, PARTITIONS, {
        "caught_up": {p: str(n) for p, n in ends.items()},
        "none_yet": {},
        "one_behind": {**{p: str(n) for p, n in ends.items()},
                       one.partition: str(ends[one.partition] - 1)},
    }, now_ms=now)  # fmt: skip
    assert lags["caught_up"] == Lag(0, False, 0)
    assert lags["none_yet"] == Lag(12, False, now - first)
    newest_of_partition = max(e.ingest_ms for e in events.values()
                              if e.partition == one.partition)  # fmt: skip
    assert lags["one_behind"] == Lag(1, False, now - newest_of_partition)


def test_a_frontier_short_of_a_commit_marker_only_has_nothing_behind(log: KafkaEventLog) -> None:
    """A batch is a transaction whose commit marker takes the offset after its last record; a
    query in Real-Time Mode reports the offset after its last record, short of the marker."""
    # Two events of one user: one partition, one transaction (a single event takes none).
    _, offset = log.append_batch([{"type": "profile_set", "payload": {"user": "u1", "name": n}}
                                  for n in ("a", "b")])  # fmt: skip
    read_kafka_log(log.bootstrap, log.topic, PARTITIONS, 2)
    ends = log_ends(log.bootstrap, log.topic, PARTITIONS)
    assert ends[offset.partition] == int(offset.id) + 1  # the marker, after the record
    at_record = {p: str(n) for p, n in ends.items()} | {offset.partition: offset.id}
    before_record = at_record | {offset.partition: str(int(offset.id) - 1)}
    lags = measure_all(log.bootstrap, log.topic, PARTITIONS,
                       {"at_record": at_record, "before_record": before_record})  # fmt: skip
    assert lags["at_record"] == Lag(0, False, 0)
    assert lags["before_record"].events == 2  # the record and its marker
