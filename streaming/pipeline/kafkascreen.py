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
store's source costs every pipeline; docs/performance/kafka.md measures it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa

from liveviews.log.events import FIELD_KEY, FIELD_PAYLOAD, FIELD_TIME, FIELD_TYPE
from liveviews.pipeline.source import ARROW_SCHEMA, ScreenSpec, worker_screen

RAW_COLUMNS = ("partition", "offset", "type", "key", "payload", "time", "ingest_time_ms")
"""What the screen reads: the record's ``type`` and ``time`` headers, key and value as bytes."""
_FIELDS = (
    (FIELD_TYPE, "type"), (FIELD_KEY, "key"), (FIELD_TIME, "time"), (FIELD_PAYLOAD, "payload"),
)  # fmt: skip

Batches = Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]


def screening(url: str, partitions: int, spec: ScreenSpec) -> Batches:
    """The ``mapInArrow`` function of the pipeline ``spec`` names, over a store at ``url``."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        screen = worker_screen(url, partitions, spec)
        for batch in batches:
            yield screened(screen, batch)

    return run


def screened(screen: Any, batch: pa.RecordBatch) -> pa.RecordBatch:
    """``batch``'s records that ``screen`` lets through, as ``EVENT_SCHEMA`` rows."""
    cols = batch.to_pydict()
    rows = range(batch.num_rows)
    answers: dict[int, list[tuple[bytes, dict[bytes, bytes]]]] = {}
    for i in rows:
        fields = {name: cols[col][i] for name, col in _FIELDS if cols[col][i] is not None}
        answers.setdefault(cols["partition"][i], []).append((cols["offset"][i].encode(), fields))
    kept = {(p, entry_id.decode()) for p, entries in screen.passing(list(answers.items()))
            for entry_id, _ in entries}  # fmt: skip
    out: dict[str, list[Any]] = {f.name: [] for f in ARROW_SCHEMA}
    for i in rows:
        p, offset = cols["partition"][i], cols["offset"][i]
        if (p, offset) not in kept:
            continue
        # check_entry decoded each of these as UTF-8 and the time as digits.
        out["partition"].append(p)
        out["offset"].append(offset)
        out["type"].append(cols["type"][i].decode())
        out["key"].append(cols["key"][i].decode())
        out["payload"].append(cols["payload"][i].decode())
        out["event_time_ms"].append(int(cols["time"][i]))
        out["ingest_time_ms"].append(cols["ingest_time_ms"][i])
    return pa.RecordBatch.from_pydict(out, schema=ARROW_SCHEMA)
