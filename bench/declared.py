"""Views declared as queries (``liveviews.pipeline.declared``) over Chirp's events, for the drain
figures of ``bench.pipeline``: each user's count of events and the type of the newest one.

Two forms of the same aggregation, no Python per event in either; Spark keeps each group's
state in the JVM:

- ``by="key"``: grouped by the key the log is partitioned by (``events``' own column). The
  same work as the ``spark_aggregation`` bound (``bench.ceilings``), written through the public
  API (``view_changes``), so the two side by side say what Liveviews adds to Spark's own
  aggregation: the row's JSON value made in Spark, the change rows, the sink.
- ``by="user"``: grouped by a payload field, so every payload is also parsed by its type's
  schema (``payloads``): what a view over an application's fields costs on top.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from liveviews.app import App
from liveviews.pipeline.declared import log_position, payloads, view_changes

VIEW = "user_activity"
GROUPINGS = {"key": "the log's key", "user": "a payload field, every payload parsed"}


def app(by: str = "user", realtime: bool = False) -> App:
    """An application with Chirp's event types and the one declared view, grouped ``by``; in
    Spark's Real-Time Mode when ``realtime`` (one state partition, as Chirp's ``profiles``)."""
    from demo.chirp import app as chirp

    if by not in GROUPINGS:
        raise ValueError(f"unknown grouping {by!r}; known: {', '.join(GROUPINGS)}")
    declared = App(f"declared_{by}", event_types=dict(chirp.event_types))
    declared.view(VIEW, description="each user's events: how many, and the newest one's type")

    def user_activity(events: DataFrame) -> DataFrame:
        if by == "user":
            rows = payloads(events, declared)
        else:
            rows = events.select(F.col("key").alias("user"), "type",
                                 log_position().alias("position"))  # fmt: skip
        counted = rows.groupBy("user").agg(
            F.count(F.lit(1)).alias("events"),
            F.max_by("type", "position").alias("newest"),
        )
        return view_changes(counted, VIEW, key="user")

    declared.pipeline("declared", views=[VIEW], realtime=realtime,
                      partitions=1 if realtime else None)(user_activity)  # fmt: skip
    return declared
