"""A pipeline's plan, checked when it starts (``liveviews.pipeline.plan``).

What Spark or Liveviews cannot run is refused before the first micro-batch, with a sentence
that names the pipeline and what to change, and no dead letter; a pipeline that reads the
events more than once (a union, a join of event types) runs, reading the log once a batch.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from liveviews import App, Integer, Schema, String
from liveviews.log.eventlog import EventLog
from liveviews.pipeline.declared import payloads, sql, view_changes
from liveviews.pipeline.plan import PipelineRefused, spark_said
from liveviews.pipeline.queries import sink_client, start_pipeline
from liveviews.supervise import NEEDS_A_PERSON
from tests.support.checks import stored_views
from tests.support.pipeline import RunningPipeline

ROOT = Path(__file__).resolve().parents[3]
DEAD_LETTERS = "lv:{d}:deadletters*"


def _app(build: Callable[[App, DataFrame], DataFrame], **declared: Any) -> App:
    app = App("plans")
    app.event_type("order", Schema({"order": String(), "total": Integer()}), lambda p: p["order"])
    app.event_type("payment", Schema({"order": String(), "paid": Integer()}), lambda p: p["order"])
    app.view("orders", description="each order")
    app.pipeline("orders", views=["orders"], **declared)(lambda events: build(app, events))
    return app


def _timed(app: App, events: DataFrame) -> tuple[DataFrame, DataFrame]:
    """Orders and payments, with one watermark on the events before they are split."""
    timed = (
        payloads(events, app, "order", "payment")
        .withColumn("time", F.timestamp_millis("event_time_ms"))
        .withWatermark("time", "10 seconds")
    )
    orders = timed.where("type = 'order'").select("order", "total", F.col("time").alias("at"))
    paid = timed.where("type = 'payment'").select(
        F.col("order").alias("paid_order"), "paid", F.col("time").alias("paid_at")
    )
    return orders, paid


def _outer_join(app: App, events: DataFrame) -> DataFrame:
    orders, paid = _timed(app, events)
    bound = F.expr("order = paid_order AND paid_at BETWEEN at AND at + INTERVAL 1 MINUTE")
    joined = orders.join(paid, bound, "left_outer")
    return view_changes(joined.select("order", "total", "paid"), "orders", key="order")


def _stacked(app: App, events: DataFrame) -> DataFrame:
    last = payloads(events, app, "order").groupBy("order").agg(F.max_by("total", "position"))
    counted = last.groupBy().count().withColumn("all", F.lit("all"))
    return view_changes(counted, "orders", key="all")


def _second_stream(app: App, events: DataFrame) -> DataFrame:
    ticks = events.sparkSession.readStream.format("rate").load()
    rows = payloads(events, app, "order").join(ticks, F.expr("total = value"))
    return view_changes(rows.select("order", "total"), "orders", key="order")


def _raises(app: App, events: DataFrame) -> DataFrame:
    raise KeyError("total")


REFUSED = {
    "outer join in update mode": (
        _outer_join,
        r"pipeline 'orders' cannot run: Spark refuses its query: LeftOuter join between two "
        r"streaming DataFrames.*only in Append output mode\. To run it, declare the pipeline "
        r"with output_mode='append'",
    ),
    "unknown column": (
        lambda app, events: payloads(events, app, "order").select("ordr"),
        r"pipeline 'orders' cannot run: Spark refuses its query: .*`ordr` cannot be resolved.*"
        r"To run it, name a column the query has",
    ),
    "stacked aggregations": (
        _stacked,
        r"pipeline 'orders' cannot run: Spark refuses its query: .*(?i:correctness).*To run it,"
        r" compute it with one aggregation",
    ),
    "unknown event type": (
        lambda app, events: payloads(events, app, "refund"),
        r"pipeline 'orders' cannot run: unknown event type 'refund'; known types: order, payment",
    ),
    "second stream": (
        _second_stream,
        r"pipeline 'orders' cannot run: it reads 2 streams \(liveviews-log, rate\), not only the "
        r"events it is given; build every branch",
    ),
    "no view changes": (
        lambda app, events: payloads(events, app, "order"),
        r"pipeline 'orders' cannot run: it returns no column 'view'; a pipeline returns view, "
        r"key, row, value, score \(end it with view_changes",
    ),
    "wrong column type": (
        lambda app, events: view_changes(
            payloads(events, app, "order"), "orders", key="order"
        ).withColumn("score", F.lit(1)),
        r"pipeline 'orders' cannot run: its column 'score' is int, not double",
    ),
    "error in the function": (
        _raises,
        r"pipeline 'orders' cannot run: its function raised KeyError: 'total'\.",
    ),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_a_plan_that_cannot_run_is_refused_at_start_with_a_sentence(case, spark, settings, store):
    build, sentence = REFUSED[case]
    app = _app(build)
    before = {q.name for q in spark.streams.active}
    with pytest.raises(PipelineRefused, match=sentence) as refused:
        start_pipeline(spark, app, settings, "orders", sink_client(settings))
    assert "\n" not in refused.value.message and refused.value.code == "pipeline_refused"
    assert {q.name for q in spark.streams.active} == before
    assert store.keys(DEAD_LETTERS) == []


def test_spark_said_keeps_the_first_line_without_the_plan_or_sqlstate():
    class Refusal(Exception):
        def getMessage(self) -> str:  # noqa: N802 - Spark's name
            return (
                "[UNRESOLVED_COLUMN.WITH_SUGGESTION] A column `x` cannot be resolved. "
                "SQLSTATE: 42703;\n'Project ['x]\n+- Relation"
            )

    assert spark_said(Refusal()) == (
        "Spark refuses its query: [UNRESOLVED_COLUMN.WITH_SUGGESTION] A column `x` cannot be "
        "resolved. To run it, name a column the query has (payloads() gives each field its own)."
    )


def test_an_outer_join_in_append_mode_and_a_union_each_read_the_log_once(spark, settings, store):
    """Both scan the events twice or more; each batch still reads the log to one offset, which
    the sink records as the frontier (``liveviews.pipeline.offsetlog``)."""
    app = _app(_outer_join, output_mode="append")
    app.view("totals", description="each order's total less what was paid")

    @app.pipeline("totals", views=["totals"])
    def totals(events: DataFrame) -> DataFrame:
        rows = sql(events, app, """
            SELECT `order`, sum(amount) AS due FROM (
                SELECT `order`, total AS amount FROM `order`
                UNION ALL SELECT `order`, -paid AS amount FROM payment
            ) GROUP BY `order`
        """)  # fmt: skip
        return view_changes(rows, "totals", key="order")

    log = EventLog(store, app, settings.log_partitions)
    running = RunningPipeline(spark, settings, app)
    try:
        log.append_batch([
            {"type": "order", "payload": {"order": "o1", "total": 10}},
            {"type": "order", "payload": {"order": "o2", "total": 5}},
            {"type": "payment", "payload": {"order": "o1", "paid": 10}},
        ])  # fmt: skip
        running.wait_until_caught_up(store)
        for query in running.queries:
            streams = query._jsq.streamingQuery().sources()
            assert streams.size() >= 2 and streams.distinct().size() == 1, query.name
        views = stored_views(store, settings.change_shards)
    finally:
        running.stop()
    assert views[("totals", "o1")] == {"totals": {"due": 0}}
    assert views[("totals", "o2")] == {"totals": {"due": 5}}
    assert views[("orders", "o1")] == {"orders": {"paid": 10, "total": 10}}
    assert ("orders", "o2") not in views  # unpaid: written once the bound has passed
    assert store.keys(DEAD_LETTERS) == []


@pytest.mark.timeout(300)
def test_a_refused_pipeline_exits_once_under_its_supervisor(settings, store):
    """The process prints one sentence and exits ``NEEDS_A_PERSON``; the supervisor does not
    start it again; Spark's text and the traceback are in the log file only."""
    env = {
        **os.environ,
        "REDIS_URL": settings.store_url,
        "LV_APP": "tests.support.refusedapp:app",
        "LV_DATA_DIR": str(settings.data_dir),
        "LV_CHECKPOINT_DIR": str(settings.checkpoint_dir),
        "LV_LOG_PARTITIONS": str(settings.log_partitions),
        "LV_CHANGE_SHARDS": str(settings.change_shards),
        "PYSPARK_PYTHON": sys.executable,
    }
    command = [sys.executable, "-m", "liveviews.supervise", "pipeline", "--",
               sys.executable, "-m", "liveviews.pipeline"]  # fmt: skip
    started = time.monotonic()
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    console = done.stdout + done.stderr
    assert done.returncode == NEEDS_A_PERSON, console
    assert console.count("pipeline 'unpaid' cannot run: Spark refuses its query") == 1, console
    assert "output_mode='append'" in console
    assert "Traceback" not in console and "starting it again" not in console, console
    logged = (settings.data_dir / "logs" / "pipeline.log").read_text()
    assert "Traceback" in logged and "AnalysisException" in logged
    assert store.keys(DEAD_LETTERS) == []
    assert time.monotonic() - started < 240
