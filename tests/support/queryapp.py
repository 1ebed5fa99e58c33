"""An application whose views a client subscribes to by query: a listable view of tasks keyed
``<board>/<task>``, one whose keys are readable by their owner only, and a ranked view of
scores. Its pipeline is written as Spark queries, like any application's."""

from __future__ import annotations

from typing import TYPE_CHECKING

from liveviews import App, Integer, Schema, String

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

app = App("queries")
app.event_type(
    "task_set",
    Schema({"board": String(), "task": String(), "title": String()}),
    lambda p: str(p["board"]),
)
app.event_type(
    "points_set",
    Schema({"game": String(), "player": String(), "points": Integer()}),
    lambda p: str(p["game"]),
)
app.view("tasks", description="Each task, keyed <board>/<task>.", listable=True)
app.view(
    "drafts",
    description="A person's drafts, keyed <person>/<draft>: readable by that person only.",
    listable=True,
    readable=lambda subject, key: key.split("/", 1)[0] == subject,
)
app.view("scores", description="Each game's players by points.", limit=10)


@app.pipeline("queries", views=["tasks", "drafts", "scores"])
def queries(events: DataFrame) -> DataFrame:
    from pyspark.sql import functions as F

    from liveviews.pipeline.declared import payloads, view_changes

    tasks = (
        payloads(events, app, "task_set")
        .groupBy("board", "task")
        .agg(F.max_by("title", "position").alias("title"))
    )
    points = (
        payloads(events, app, "points_set")
        .groupBy("game", "player")
        .agg(F.max_by("points", "position").alias("points"))
        .withColumn("rank", F.col("points").cast("double"))
    )
    keyed = tasks.withColumn("key", F.concat_ws("/", "board", "task"))
    return view_changes(keyed.select("key", "title"), "tasks", key="key").unionByName(
        view_changes(points, "scores", key="game", row="player", score="rank")
    )
