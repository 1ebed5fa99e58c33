"""An application whose one pipeline Spark refuses to run: an outer join of two event types in
the default (update) output mode, which Spark allows only in append mode. Started as a process,
the pipeline must stop with a sentence, once, before any micro-batch."""

from __future__ import annotations

from typing import TYPE_CHECKING

from liveviews import App, Integer, Schema, String

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

app = App("refused")
app.event_type("order", Schema({"order": String(), "total": Integer()}), lambda p: p["order"])
app.event_type("payment", Schema({"order": String(), "paid": Integer()}), lambda p: p["order"])
app.view("unpaid", description="Each order, with its payment once it has one.")


@app.pipeline("unpaid", views=["unpaid"])
def unpaid(events: DataFrame) -> DataFrame:
    from pyspark.sql import functions as F

    from liveviews.pipeline.declared import payloads, view_changes

    timed = (
        payloads(events, app, "order", "payment")
        .withColumn("time", F.timestamp_millis("event_time_ms"))
        .withWatermark("time", "10 seconds")
    )
    orders = timed.where("type = 'order'").select("order", "total", F.col("time").alias("at"))
    paid = timed.where("type = 'payment'").select(
        F.col("order").alias("paid_order"), "paid", F.col("time").alias("paid_at")
    )
    joined = orders.join(
        paid,
        F.expr("order = paid_order AND paid_at BETWEEN at AND at + INTERVAL 1 MINUTE"),
        "left_outer",
    )
    return view_changes(joined.select("order", "total", "paid"), "unpaid", key="order")
