"""The log source's two readers against the real store: what a batch reads and where it ends."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from pyspark.errors import PySparkNotImplementedError

from demo.chirp import app
from demo.chirp.generate import Activity
from liveviews.log.eventlog import EventLog
from liveviews.log.events import entry_id_tuple
from liveviews.pipeline import source
from liveviews.pipeline.source import LogDataSource, LogPrefetchReader, LogStreamReader, _read_range
from tests.support.transactions import append_transactions

PARTITIONS = 4


def _ids(batches: list[pa.RecordBatch]) -> list[tuple[int, str]]:
    if not batches:
        return []
    table = pa.Table.from_batches(batches)
    return list(zip(table["partition"].to_pylist(), table["offset"].to_pylist(), strict=True))


def _source(store_url: str, read_tasks: str) -> LogDataSource:
    return LogDataSource(
        {"url": store_url, "partitions": str(PARTITIONS), "maxEventsPerBatch": "40",
         "readTasks": read_tasks}
    )  # fmt: skip


def test_the_driver_reads_each_batch_up_to_its_limit_and_again_the_same(store, store_url):
    log = EventLog(store, app, PARTITIONS)
    offsets = log.append_batch(Activity(users=30, seed=4).take(100))
    reader = _source(store_url, "0").simpleStreamReader(LogDataSource.schema(None))  # type: ignore[arg-type]
    assert isinstance(reader, LogPrefetchReader)

    start = reader.initialOffset()
    seen: list[tuple[int, str]] = []
    while True:
        batches, end = reader.read(start)
        got = _ids(list(batches))
        if not got:
            assert end == start  # nothing new: Spark plans no batch
            break
        assert len(got) <= 40  # maxEventsPerBatch, spread over the partitions
        # A batch replayed after a restart reads exactly the same events from its offsets.
        assert _ids(list(reader.readBetweenOffsets(start, end))) == got
        for p, entry in got:
            assert entry_id_tuple(start[str(p)]) < entry_id_tuple(entry)
            assert entry_id_tuple(entry) <= entry_id_tuple(end[str(p)])
        seen += got
        start = end
    assert sorted(seen) == sorted((o.partition, o.id) for o in offsets)
    newest = {str(o.partition): o.id for o in sorted(offsets, key=lambda o: entry_id_tuple(o.id))}
    assert start == newest


def test_read_tasks_choose_the_executor_reader():
    source = _source("redis://unused", "2")
    assert isinstance(source.streamReader(LogDataSource.schema(source)), LogStreamReader)
    with pytest.raises(PySparkNotImplementedError):
        _source("redis://unused", "0").streamReader(LogDataSource.schema(source))


def test_a_batch_never_ends_inside_a_source_transaction(store, store_url):
    """The changes of one database transaction become visible in the views together: a batch
    holds all of a transaction's events or none, even where the cap would cut it, and a
    transaction larger than the cap comes whole in one batch."""
    # (90 events: more than the cap of 40 allows, in 4 partitions of 10.)
    sizes = [3, 0, 17, 1, 0, 0, 25, 8, 90, 2, 0, 13, 40, 0, 5]
    tx_of = append_transactions(store, sizes, PARTITIONS)
    reader = _source(store_url, "0").simpleStreamReader(LogDataSource.schema(None))  # type: ignore[arg-type]
    start, seen, batches = reader.initialOffset(), [], 0
    while True:
        read, end = reader.read(start)
        got = _ids(list(read))
        if not got:
            break
        batches += 1
        counts: dict[str, int] = {}
        for entry in got:
            if entry in tx_of:
                counts[tx_of[entry]] = counts.get(tx_of[entry], 0) + 1
        for tx, n in counts.items():
            assert n == sizes[int(tx[2:], 16)], f"batch {batches} holds {n} events of {tx}"
        # Over the cap only to hold a transaction larger than a partition's share of it.
        assert len(got) <= 40 or max(counts.values()) > 40 // PARTITIONS
        assert _ids(list(reader.readBetweenOffsets(start, end))) == got
        seen += got
        start = end
    assert len(seen) == len(set(seen)) == sum(max(n, 1) for n in sizes)
    assert batches >= 6


def test_cutting_a_partition_before_one_transaction_can_cut_another():
    from liveviews.log.events import FIELD_TX, FIELD_TX_EVENTS
    from liveviews.pipeline.source import whole_transactions

    def entry(i: int, tx: str | None = None, n: int = 0) -> tuple[bytes, dict[bytes, bytes]]:
        fields = {FIELD_TX: tx.encode(), FIELD_TX_EVENTS: str(n).encode()} if tx else {}
        return (f"{i}-0".encode(), fields)

    # Partition 0 holds all of A then part of B; partition 1 holds the rest of A's and C's
    # first half after a plain event; partition 2 the other half of C, after B's cut.
    answers = [
        [entry(1, "A", 3), entry(2, "A", 3), entry(3, "B", 2)],
        [entry(4), entry(5, "A", 3), entry(6, "C", 2)],
        [entry(7, "C", 2)],
    ]
    assert [len(e) for e in whole_transactions(answers)] == [2, 3, 1]
    # B now has a third event the read did not reach: cutting it from partition 2 takes C's
    # half there too, so C goes from partition 1.
    answers[0][2] = entry(3, "B", 3)
    answers[2] = [entry(8, "B", 3), entry(9, "C", 2)]
    assert [len(e) for e in whole_transactions(answers)] == [2, 2, 0]
    plain = [[entry(1), entry(2)], []]
    assert whole_transactions(plain) is plain


class _Behind:
    """A store client whose first ``lag`` reads of a range find nothing new, as a replica
    behind its primary does; then it reads the store."""

    def __init__(self, client: Any, lag: int) -> None:
        self.client, self.lag, self.reads = client, lag, 0

    def xrange(self, *args: Any) -> Any:
        self.reads += 1
        return [] if self.reads <= self.lag else self.client.xrange(*args)


def test_a_range_read_waits_for_a_replica_behind_its_primary(store):
    offsets = EventLog(store, app, 1).append_batch(Activity(users=3, seed=1).take(5))
    client = _Behind(store, lag=2)
    batches = list(_read_range(client, 0, "0-0", offsets[-1].id, None))
    assert client.reads == 3
    assert _ids(batches) == [(0, o.id) for o in offsets]


def test_a_range_whose_end_never_arrives_fails_the_batch_saying_why(
    store, monkeypatch: pytest.MonkeyPatch
):
    offsets = EventLog(store, app, 1).append_batch(Activity(users=3, seed=1).take(2))
    monkeypatch.setattr(source, "STORE_OUTAGE_S", 0.2)
    with pytest.raises(RuntimeError, match=f"log partition 0 holds no entry {offsets[-1].id}"):
        list(_read_range(_Behind(store, lag=10**6), 0, "0-0", offsets[-1].id, None))
