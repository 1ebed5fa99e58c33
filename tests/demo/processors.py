"""The state processors that wrote Chirp's ``profiles`` and ``activity`` views before they were
declared as queries (``demo.chirp.declared``): the reference the declared forms are compared
with, row for row (``test_chirp_declared.py``).

``ProfileProcessor`` is what ``EntityProcessor.on_profile_set`` wrote to ``profiles``: every
``profile_set`` upserts the user's row, in log order. ``ActivityProcessor`` counted events per
type per minute with a watermark per log partition, counting late events apart.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import orjson
from pyspark.sql import DataFrame, Row
from pyspark.sql import functions as F
from pyspark.sql.streaming.stateful_processor import (
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)
from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

from demo.chirp.views import profile_value
from liveviews.log.events import iso
from liveviews.pipeline.isolation import isolated
from liveviews.pipeline.views import CHANGE_SCHEMA, Changes, log_order

WINDOW_MS = 60_000
LATENESS_MS = 30_000
PARTITION = StructType([StructField("partition", IntegerType())])
NEWEST = StructType([StructField("event_time_ms", LongType())])
WINDOW_START = StructType([StructField("start", LongType())])
WINDOW_COUNTS = StructType([StructField("counts", StringType())])


class ProfileProcessor(StatefulProcessor):
    """A user's profile, latest in log order, upserted at each ``profile_set``."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        pass

    def handleInputRows(
        self, key: Any, rows: Iterator[Row], timerValues: TimerValues
    ) -> Iterator[Row]:
        (user,) = key
        changes = Changes()
        for _, _, payload in sorted((log_order(r.offset), r.type, r.payload) for r in rows):
            p = orjson.loads(payload)
            profile = [p["name"], p.get("avatar")]
            changes.upsert("profiles", user, "profile", profile_value(user, profile))
        yield from changes.rows()

    def close(self) -> None:
        pass


class ActivityProcessor(StatefulProcessor):
    """Events per type per minute of event time, with late arrivals counted apart.

    In log order within each partition, an event is late when its time is more than
    ``LATENESS_MS`` before the newest time seen earlier in that partition. Row-based: a
    micro-batch of a few events costs a few state accesses and no pandas frame.
    """

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.newest = handle.getMapState("newest", PARTITION, NEWEST)
        self.windows = handle.getMapState("windows", WINDOW_START, WINDOW_COUNTS)

    def handleInputRows(
        self, key: Any, rows: Iterator[Row], timerValues: TimerValues
    ) -> Iterator[Row]:
        events = sorted((r.partition, log_order(r.offset), r.event_time_ms, r.type) for r in rows)
        newest: dict[int, int] = {}
        counts: dict[tuple[int, bool, str], int] = defaultdict(int)
        for part, _, time_ms, type_ in events:
            if part not in newest:
                stored = self.newest.getValue((part,))
                newest[part] = stored[0] if stored else -1
            seen = newest[part]
            late = seen >= 0 and time_ms < seen - LATENESS_MS
            if type_ is not None:
                counts[(time_ms - time_ms % WINDOW_MS, late, type_)] += 1
            newest[part] = max(seen, time_ms)
        windows: dict[int, dict[str, dict[str, int]]] = {}
        for (start, is_late, type_), n in counts.items():
            if start not in windows:
                stored = self.windows.getValue((start,))
                windows[start] = orjson.loads(stored[0]) if stored else {"counts": {}, "late": {}}
            bucket = windows[start]["late" if is_late else "counts"]
            bucket[type_] = bucket.get(type_, 0) + n
        for part, value in newest.items():
            self.newest.updateValue((part,), (value,))
        changes = Changes()
        for start, w in windows.items():
            self.windows.updateValue((start,), (orjson.dumps(w).decode(),))
            changes.upsert("activity", "global", iso(start), window_value(start, w), start)
        yield from changes.rows()

    def close(self) -> None:
        pass


def window_value(start: int, w: dict[str, dict[str, int]]) -> dict[str, Any]:
    return {
        "window_start": iso(start),
        "window_end": iso(start + WINDOW_MS),
        "counts": w["counts"],
        "late": w["late"],
        "total": sum(w["counts"].values()),
        "late_total": sum(w["late"].values()),
    }


def profiles(events: DataFrame) -> DataFrame:
    chosen = events.where(F.col("type") == "profile_set").select(
        "partition", "key", "offset", "type", "payload"
    )
    return chosen.groupBy("key").transformWithState(
        isolated(ProfileProcessor()), CHANGE_SCHEMA, "Update", "None"
    )


def activity(events: DataFrame) -> DataFrame:
    counted = events.select("partition", "offset", "type", "event_time_ms")
    return (
        counted.withColumn("scope", F.lit("global"))
        .groupBy("scope")
        .transformWithState(isolated(ActivityProcessor()), CHANGE_SCHEMA, "Update", "None")
    )
