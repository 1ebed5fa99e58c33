"""The log source's two readers against the real store: what a batch reads and where it ends."""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyspark.errors import PySparkNotImplementedError

from demo.chirp import app
from demo.chirp.generate import Activity
from streaming.core.events import entry_id_tuple
from streaming.core.log import EventLog
from streaming.job.source import LogDataSource, LogPrefetchReader, LogStreamReader

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
