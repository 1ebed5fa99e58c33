"""The dead-letter screen of a pipeline that reads a Kafka log.

On Redis Streams the pipeline's own source leaves out what it sets aside
(``liveviews.log.screen``). Spark's Kafka source is the JVM's, so on Kafka the same screen is a
step between it and the views: a ``mapInArrow`` whose Python worker gets each task's records
as Arrow batches, leaves out the records the pipeline set aside before (its quarantine: entries
it could not decode, events a view raised on, a failed batch's), checks the others with
``check_entry`` (the rules the store's source applies, on the same fields: the ``type`` and
``time`` headers, the key, the value as the payload), records those it cannot decode as dead
letters and passes the rest on as ``EVENT_SCHEMA`` rows. A batch replayed after a crash makes
the same decision: what was set aside is in the quarantine.

The step makes a pipeline of declared views run Python once per task, which is what the
store's source costs every pipeline. It costs a quarter of a Kafka drain's rate (most of it
Arrow's transfer of each record to the Python worker and back: docs/performance/kafka.md);
a screen in the JVM would win that back. Real-Time Mode, which refuses Python, reads the topic
unscreened (``liveviews.pipeline.realtime.query``, docs/REALTIME.md).
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from liveviews.log.kafka.records import entry_fields
from liveviews.pipeline.source import ARROW_SCHEMA, ScreenSpec, worker_screen

RAW_COLUMNS = ("partition", "offset", "type", "key", "payload", "time", "ingest_time_ms")
"""What the screen reads: the record's ``type`` and ``time`` headers, key and value as bytes."""

Batches = Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]


def screening(url: str, partitions: int, spec: ScreenSpec) -> Batches:
    """The ``mapInArrow`` function of the pipeline ``spec`` names, over a store at ``url``."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        screen = worker_screen(url, partitions, spec)
        for batch in batches:
            with _collector_paused():
                out = screened(screen, batch)
            yield out

    return run


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off while a batch is screened: a batch makes a few
    small objects per record, none in a cycle (reference counting frees them), and collections
    triggered by their number cost more than the checks (docs/performance/kafka.md)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def screened(screen: Any, batch: pa.RecordBatch) -> pa.RecordBatch:
    """``batch``'s records that ``screen`` lets through, as ``EVENT_SCHEMA`` rows.

    Python touches each record once, to check it; the rows kept are taken and converted by
    Arrow's own kernels."""
    partitions = batch.column("partition").to_pylist()
    offsets = batch.column("offset").to_pylist()
    columns = [batch.column(c).to_pylist() for c in ("type", "key", "time", "payload")]
    answers: dict[int, list[tuple[bytes, dict[bytes, bytes]]]] = {}
    for p, offset, t, k, tm, v in zip(partitions, offsets, *columns, strict=True):
        answers.setdefault(p, []).append((offset.encode(), entry_fields(t, k, tm, v)))
    kept = {(p, entry_id) for p, entries in screen.passing(list(answers.items()))
            for entry_id, _ in entries}  # fmt: skip
    if len(kept) < batch.num_rows:
        mask = [(p, o.encode()) in kept for p, o in zip(partitions, offsets, strict=True)]
        batch = batch.filter(pa.array(mask, pa.bool_()))
    # check_entry decoded each kept type, key and payload as UTF-8, and read its time as digits.
    text = [pc.cast(batch.column(c), pa.string()) for c in ("type", "key", "payload")]
    time_ms = pc.cast(pc.cast(batch.column("time"), pa.string()), pa.int64())
    return pa.RecordBatch.from_arrays(
        [batch.column("partition"), batch.column("offset"), *text, time_ms,
         batch.column("ingest_time_ms")],
        schema=ARROW_SCHEMA,
    )  # fmt: skip
