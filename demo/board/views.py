"""The board's views, each a Spark query over the log (``liveviews.pipeline.declared``): no Python
runs per event, and no state processor is written by hand.

- ``tasks``: one row per task, keyed ``<board>/<task>``, with its newest title, column and
  assignee (latest by log position); a task deleted, or never created, has no row.
- ``leaderboard``: one row per person who got kudos on a board, scored by their count.
- ``boards``: one row per board, with how many tasks were created and kudos given on it.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from liveviews import App, payloads, sql, view_changes

TASK_EVENTS = ("task_created", "task_moved", "task_renamed", "task_assigned", "task_deleted")


def newest(value: Column | str, where: Column) -> Column:
    """The value of the task's last event for which ``where`` holds: ``max_by`` skips a row
    whose ordering is null, so the others do not count, even when ``value`` is null there (an
    assignment to nobody)."""
    return F.max_by(value, F.when(where, F.col("position")))


def tasks(events: DataFrame, app: App) -> DataFrame:
    changes = payloads(events, app, *TASK_EVENTS)
    kind = F.col("type")
    column = F.coalesce(F.col("status"), F.when(kind == "task_created", F.lit("todo")))
    latest = changes.groupBy("board", "task").agg(
        newest("title", F.col("title").isNotNull()).alias("title"),
        # Deleted is for good: a move that comes after the delete does not bring it back.
        F.when(F.max(kind == "task_deleted"), F.lit("deleted"))
        .otherwise(newest(column, column.isNotNull()))
        .alias("status"),
        newest("assignee", kind == "task_assigned").alias("assignee"),
        F.min(F.when(kind == "task_created", F.col("event_time_ms"))).alias("created_at"),
        F.max("event_time_ms").alias("changed_at"),
        F.max_by("person", "position").alias("changed_by"),
    )
    keyed = latest.withColumn("id", F.concat_ws("/", "board", "task"))
    shown = F.col("created_at").isNotNull() & (F.col("status") != "deleted")
    return view_changes(keyed, "tasks", key="id", keep=shown)


def leaderboard(events: DataFrame, app: App) -> DataFrame:
    counted = sql(events, app, """
        SELECT board, receiver, count(*) AS kudos, count(*) AS score,
               max_by(giver, position) AS last_giver, max_by(note, position) AS last_note
        FROM kudos_given GROUP BY board, receiver
    """)  # fmt: skip
    return view_changes(counted, "leaderboard", key="board", row="receiver", score="score")


def boards(events: DataFrame, app: App) -> DataFrame:
    everything = payloads(events, app)
    counted = everything.groupBy("board").agg(
        F.count(F.when(F.col("type") == "task_created", 1)).alias("tasks"),
        F.count(F.when(F.col("type") == "kudos_given", 1)).alias("kudos"),
        F.max("event_time_ms").alias("last_at"),
        F.max_by(F.coalesce("person", "giver"), "position").alias("last_by"),
    )
    return view_changes(counted, "boards", key="board")
