"""Views declared as queries (``liveviews.pipeline.declared``), on the test run's SparkSession.

A small shop declares two views without a state processor: each tweet's like count, written
with the DataFrame API (an ``unlike`` takes a like back; a count back to zero deletes the row),
and each customer's open orders, written in Spark SQL with latest-by-offset (an order that is
paid leaves the view). Random events go through the real pipeline in several micro-batches;
the stored views must equal a recomputation in Python and a replay of the change topic, and
Spark's plan must hold no Python operator.
"""

from __future__ import annotations

import random
from collections import defaultdict
from typing import Any

import pytest
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from liveviews import App, ConfigurationError, Float, Schema, String
from liveviews.log.eventlog import EventLog
from liveviews.pipeline.declared import payloads, sql, view_changes
from liveviews.pipeline.views import EVENT_SCHEMA
from tests.support.checks import replayed_views, stored_views
from tests.support.pipeline import RunningPipeline

app = App("shop")
app.event_type("like", Schema({"user": String(), "tweet": String()}), lambda p: p["tweet"])
app.event_type("unlike", Schema({"user": String(), "tweet": String()}), lambda p: p["tweet"])
ORDER = Schema({"customer": String(), "order": String(), "status": String(), "total": Float(),
                "coupon": String(optional=True)})  # fmt: skip
app.event_type("order", ORDER, lambda p: p["customer"])
app.view("like_counts", description="each tweet's likes")
app.view("open_orders", description="each customer's open orders")


@app.pipeline("likes", views=["like_counts"])
def likes(events: DataFrame) -> DataFrame:
    votes = payloads(events, app, "like", "unlike")
    counted = votes.groupBy("tweet").agg(
        F.sum(F.when(F.col("type") == "like", 1).otherwise(-1)).alias("likes"),
        F.max_by("user", "position").alias("last_user"),
    )
    return view_changes(counted, "like_counts", key="tweet", keep=F.col("likes") > 0)


@app.pipeline("orders", views=["open_orders"])
def orders(events: DataFrame) -> DataFrame:
    latest = sql(events, app, """
        SELECT customer, `order`, max_by(status, position) AS status,
               max_by(total, position) AS total, max_by(coupon, position) AS coupon
        FROM `order` GROUP BY customer, `order`
    """)  # fmt: skip
    return view_changes(
        latest, "open_orders", key="customer", row="order", keep=F.col("status") == "open"
    )


def _events(rng: random.Random, n: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for _ in range(n):
        tweet, user = f"t{rng.randrange(6)}", f"u{rng.randrange(5)}"
        roll = rng.random()
        if roll < 0.35:
            out.append({"type": "like", "payload": {"user": user, "tweet": tweet}})
        elif roll < 0.55:
            out.append({"type": "unlike", "payload": {"user": user, "tweet": tweet}})
        else:
            order = {"customer": f"c{rng.randrange(4)}", "order": f"o{rng.randrange(12)}",
                     "status": rng.choice(["open", "open", "paid", "shipped"]),
                     "total": round(rng.uniform(1, 100), 2)}  # fmt: skip
            if rng.random() < 0.5:
                order["coupon"] = rng.choice(["A", "B"])
            out.append({"type": "order", "payload": order})
    return out


def _recompute(events: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    """The views from the events in log order (a key's events are in one partition)."""
    counts: dict[str, int] = defaultdict(int)
    last_user: dict[str, str] = {}
    latest: dict[tuple[str, str], dict[str, Any]] = {}
    for e in events:
        p = e["payload"]
        if e["type"] in ("like", "unlike"):
            counts[p["tweet"]] += 1 if e["type"] == "like" else -1
            last_user[p["tweet"]] = p["user"]
        else:
            latest[(p["customer"], p["order"])] = p
    out: dict[tuple[str, str], dict[str, Any]] = defaultdict(dict)
    for tweet, n in counts.items():
        if n > 0:
            out[("like_counts", tweet)]["like_counts"] = {"likes": n, "last_user": last_user[tweet]}
    for (customer, order), p in latest.items():
        if p["status"] == "open":
            value = {"status": "open", "total": p["total"], "coupon": p.get("coupon")}
            out[("open_orders", customer)][order] = value
    return dict(out)


def test_declared_views_equal_a_recomputation_through_several_batches(store, settings, spark):
    rng = random.Random(7)
    log = EventLog(store, app, settings.log_partitions)
    running = RunningPipeline(spark, settings, app)
    written: list[dict[str, Any]] = []
    try:
        for size in (40, 60, 80, 120):  # each batch a micro-batch or more: updates and deletes
            batch = _events(rng, size)
            log.append_batch(batch)
            written += batch
            running.wait_until_caught_up(store)
    finally:
        running.stop()
    expected = _recompute(written)
    assert any(k[0] == "open_orders" for k in expected) and any(
        k[0] == "like_counts" for k in expected
    )
    stored = stored_views(store, settings.change_shards)
    assert stored == expected
    replayed, deltas = replayed_views(store, settings.change_shards)
    assert replayed == stored and deltas > 0


def test_a_declared_view_runs_no_python_per_event(spark):
    events = spark.createDataFrame(
        [(0, "1-0", "like", "t1", '{"user": "u", "tweet": "t1"}', 1, 1)], EVENT_SCHEMA
    )
    for build in (likes, orders):
        plan = build(events)._jdf.queryExecution().executedPlan().toString()
        assert "Python" not in plan and "ArrowEval" not in plan, plan


def test_declarations_that_cannot_work_are_refused_with_a_sentence(spark):
    events = spark.createDataFrame([], EVENT_SCHEMA)
    with pytest.raises(ConfigurationError, match="unknown event type 'likes'; known types"):
        payloads(events, app, "likes")
    counted = payloads(events, app, "like").groupBy("tweet").count()
    with pytest.raises(ConfigurationError, match="the query has no column 'order'"):
        view_changes(counted, "open_orders", key="tweet", row="order")
    with pytest.raises(ConfigurationError, match="no column left for the rows' value"):
        view_changes(counted.select("tweet"), "like_counts", key="tweet")
    clash = App("clash")
    clash.event_type("a", Schema({"n": String()}), lambda p: p["n"])
    clash.event_type("b", Schema({"n": Float()}), lambda p: "k")
    with pytest.raises(ConfigurationError, match="field 'n' is a string in one of a, b"):
        payloads(events, clash)
