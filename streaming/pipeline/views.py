"""Spark-side shapes shared by every pipeline: the event columns in, the change columns out."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson
from pyspark.sql import Row
from pyspark.sql.types import (
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from liveviews.log.events import entry_id_tuple

EVENT_SCHEMA = StructType(
    [
        StructField("partition", IntegerType(), False),
        StructField("offset", StringType(), False),
        StructField("type", StringType(), True),
        StructField("key", StringType(), True),
        StructField("payload", StringType(), True),
        StructField("event_time_ms", LongType(), True),
        StructField("ingest_time_ms", LongType(), True),
    ]
)
"""What a pipeline receives: one row per event, in no particular order across partitions."""

CHANGE_SCHEMA = StructType(
    [
        StructField("view", StringType(), False),
        StructField("key", StringType(), False),
        StructField("row", StringType(), False),
        StructField("value", StringType(), True),
        StructField("score", DoubleType(), False),
    ]
)
"""What a pipeline returns: the new value of a row (JSON), or a null value to delete it.

``score`` orders the rows of views that keep only their top rows; other views ignore it.
"""


DEAD_LETTER_VIEW = "__dead_letter__"
"""A change row that is not a change: the event at ``key`` (``<partition>:<entry id>``) was set
aside, ``value`` says why (``liveviews.pipeline.isolation``); the sink records it as a dead letter.
No view can have this name (view names start with a letter)."""


def encode_value(value: Any) -> str:
    """Canonical JSON (sorted keys), so equal values compare equal in the sink."""
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()


log_order = entry_id_tuple
"""Sort key of an event's ``offset`` within its partition: the log's order."""


@dataclass
class Changes:
    """The rows a processor changes while handling one group; the last write of a row wins."""

    _rows: dict[tuple[str, str, str], tuple[str | None, float]] = field(default_factory=dict)

    def upsert(self, view: str, key: str, row: str, value: Any, score: float = 0.0) -> None:
        self._rows[(view, key, row)] = (encode_value(value), float(score))

    def delete(self, view: str, key: str, row: str) -> None:
        self._rows[(view, key, row)] = (None, 0.0)

    def __len__(self) -> int:
        return len(self._rows)

    def rows(self) -> list[Row]:
        return [
            Row(view=v, key=k, row=r, value=val, score=score)
            for (v, k, r), (val, score) in self._rows.items()
        ]
