"""Chirp's views that a Spark query can say, declared as queries: no Python runs per event.

``profiles`` is each user's latest ``profile_set`` by log offset. ``activity`` counts events per
type in 1-minute tumbling windows of event time, with Spark's own watermark (``withWatermark``,
``LATENESS``) and its eviction of closed windows: an event whose window had already closed
when its micro-batch ran is dropped by Spark, not counted. Spark's watermark is one for the
query, the newest event time of the earlier micro-batches less ``LATENESS``, so which late
events are dropped depends on where the micro-batches were cut (docs/VIEWS.md).

``likes`` stays in the state processor (``demo/chirp/views.py``): a like repeated or an unlike
without a like changes nothing, which needs each (tweet, user)'s last vote and then a count of
them per tweet, two stacked aggregations that Spark refuses in update mode.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from liveviews import App, payloads, view_changes

LATENESS = "30 seconds"
WINDOW = "1 minute"
MAX_AHEAD_MS = 10_000
"""An event dated more than this after it reached the log is not counted. Spark's watermark
follows the newest event time of the whole query: one event dated in the future (a producer's
wrong clock, a tweet dated in year 9999) would close every window before it, for everyone."""


def profiles(events: DataFrame, app: App) -> DataFrame:
    """``profiles/{user}``: row ``profile``, the user's name and avatar, latest by offset."""
    latest = (
        payloads(events, app, "profile_set")
        .groupBy("user")
        .agg(F.max_by(F.struct("name", "avatar"), "position").alias("set"))
    )
    rows = latest.select(
        F.col("user").alias("owner"), F.lit("profile").alias("row"), "user", "set.name",
        "set.avatar",
    )  # fmt: skip
    return view_changes(rows, "profiles", key="owner", row="row")


def iso(ts: Column) -> Column:
    """A timestamp as the pipeline's other views write times (``2026-01-01T00:00:00.000Z``); the
    pipeline's session runs in UTC (``liveviews.pipeline.session``)."""
    return F.date_format(ts, "yyyy-MM-dd'T'HH:mm:ss.SSS'Z'")


def activity(events: DataFrame, app: App) -> DataFrame:
    """``activity/global``: a row per minute of event time, scored by its start, with the count
    of each event type seen in it (types not seen are left out) and their total."""
    types = sorted(app.event_types)
    timed = events.where(F.col("event_time_ms") <= F.col("ingest_time_ms") + MAX_AHEAD_MS)
    counted = (
        timed.select(F.timestamp_millis("event_time_ms").alias("event_time"), "type")
        .withWatermark("event_time", LATENESS)
        .groupBy(F.window("event_time", WINDOW))
        .agg(*[F.count_if(F.col("type") == t).alias(t) for t in types])
    )
    pairs = [c for t in types for c in (F.lit(t), F.col(t))]
    counts = F.map_filter(F.create_map(*pairs), lambda _, n: n > 0)
    rows = counted.select(
        F.lit("global").alias("scope"),
        iso(F.col("window.start")).alias("at"),
        iso(F.col("window.start")).alias("window_start"),
        iso(F.col("window.end")).alias("window_end"),
        F.unix_millis(F.col("window.start")).alias("start_ms"),
        counts.alias("counts"),
        sum((F.col(t) for t in types), F.lit(0)).alias("total"),
    )
    return view_changes(rows, "activity", key="scope", row="at", score="start_ms")
