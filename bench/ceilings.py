"""Upper bounds of a backlog drain on this machine: the same backlog through pipelines that do
less than Chirp's views, on the same SparkSession, source and sink.

- ``source``: the log source alone. Every event is read from the store and handed to Spark;
  the pipeline keeps none of them, and the sink writes no change, only the frontier.
- ``python_operator``: the source, then a Python stateful processor grouped as Chirp's
  entities are (by bucket of users, with the same columns) that reads every event and keeps
  and returns nothing: what Spark's Python ``transformWithState`` costs before any view logic,
  state access or change row.

A drain through every view cannot be faster than either.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from pyspark import cloudpickle
from pyspark.sql import DataFrame, Row
from pyspark.sql import functions as F
from pyspark.sql.streaming.stateful_processor import (
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)

from demo.chirp.views import entity_input
from streaming.app import App
from streaming.events import LOG_PREFIX
from streaming.views import CHANGE_SCHEMA

if TYPE_CHECKING:
    import redis

KINDS = {
    "source": "the log source alone (no view)",
    "python_operator": "the log source and a Python stateful operator that does nothing",
}

# Spark's Python workers unpickle the processor; ``bench`` is not an installed package, so its
# code travels by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def app(kind: str) -> App:
    """An application with one pipeline of ``kind`` and the event types of Chirp."""
    from demo.chirp import app as chirp

    if kind not in KINDS:
        raise ValueError(f"unknown ceiling {kind!r}; known: {', '.join(KINDS)}")
    ceiling = App(f"ceiling_{kind}", event_types=dict(chirp.event_types))
    ceiling.view("nothing")
    ceiling.pipeline(kind, views=["nothing"])(_source if kind == "source" else _python_operator)
    return ceiling


def _source(events: DataFrame) -> DataFrame:
    # A condition no event meets, which Spark cannot fold away: every event is still read.
    kept = events.where(F.col("event_time_ms") < 0)
    return kept.select(
        F.lit("nothing").alias("view"),
        "key",
        F.col("offset").alias("row"),
        F.lit(None).cast("string").alias("value"),
        F.lit(0.0).alias("score"),
    )


def _python_operator(events: DataFrame) -> DataFrame:
    return entity_input(events).transformWithState(Nothing(), CHANGE_SCHEMA, "Update", "None")


class Nothing(StatefulProcessor):
    """Reads each row Spark passes it; no state, no output."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        pass

    def handleInputRows(
        self, key: Any, rows: Iterator[Row], timerValues: TimerValues
    ) -> Iterator[Row]:
        for _ in rows:
            pass
        return iter(())

    def close(self) -> None:
        pass


def forget_views(client: redis.Redis) -> None:
    """Everything but the log: the next pipeline starts from an empty change topic and frontier."""
    for key in list(client.scan_iter(count=1000)):
        if not key.startswith(LOG_PREFIX.encode()):
            client.delete(key)
