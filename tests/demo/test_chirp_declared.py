"""Chirp's ``profiles`` and ``activity``, declared as queries, against the state processors that
wrote them before (``tests/demo/processors.py``), on the same log.

Both forms run side by side as pipelines of one application on the session's SparkSession,
the processors' rows written to views of their own (``processor_profiles``,
``processor_activity``), through several micro-batches. Every row must be the same, except
where the forms differ by design: the processor counted an event older than its partition's
newest event time less 30 s apart as ``late``; Spark's watermark drops an event whose window
had closed before its micro-batch, and counts every other one.
"""

from __future__ import annotations

import random
import time
from typing import Any

import pytest
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from demo.chirp import declared
from demo.chirp.events import declare
from demo.chirp.generate import Activity
from liveviews import App
from liveviews.log.eventlog import EventLog
from liveviews.log.events import iso
from liveviews.pipeline.views import EVENT_SCHEMA
from tests.demo import processors
from tests.support.checks import stored_views
from tests.support.pipeline import RunningPipeline
from tests.support.reference import activity_batches, activity_counts, read_log

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z
MINUTE = 60_000

app = App("chirp_forms")
declare(app)
for name in ("profiles", "processor_profiles"):
    app.view(name, description="a user's profile")
for name in ("activity", "processor_activity"):
    app.view(name, description="events per minute", limit=60)


def _as_processor(rows: DataFrame) -> DataFrame:
    view = F.col("view")
    moved = F.when(view.isin("profiles", "activity"), F.concat(F.lit("processor_"), view))
    return rows.withColumn("view", moved.otherwise(view))


@app.pipeline("profiles", views=["profiles"])
def profiles(events: DataFrame) -> DataFrame:
    return declared.profiles(events, app)


@app.pipeline("activity", views=["activity"], partitions=1)
def activity(events: DataFrame) -> DataFrame:
    return declared.activity(events, app)


@app.pipeline("processor_profiles", views=["processor_profiles"])
def processor_profiles(events: DataFrame) -> DataFrame:
    return _as_processor(processors.profiles(events))


@app.pipeline("processor_activity", views=["processor_activity"], partitions=1)
def processor_activity(events: DataFrame) -> DataFrame:
    return _as_processor(processors.activity(events))


def _run(
    store: Any, settings: Any, spark: Any, batches: list[list[dict[str, Any]]],
    watermarks: tuple[str, ...] = (),
) -> Any:  # fmt: skip
    """Each batch appended once the views reflect the one before: a micro-batch or more each.
    ``watermarks[i]``: after batch i, also wait until the activity query has run a batch with
    that watermark (Spark runs one without new events to move it), so the next batch's events
    meet it."""
    log = EventLog(store, app, settings.log_partitions)
    running = RunningPipeline(spark, settings, app)
    try:
        for i, batch in enumerate(batches):
            log.append_batch(batch)
            running.wait_until_caught_up(store)
            if i < len(watermarks):
                _wait_for_watermark(running, watermarks[i])
    finally:
        running.stop()
    return stored_views(store, settings.change_shards)


def _wait_for_watermark(running: RunningPipeline, watermark: str, timeout: float = 60) -> None:
    (query,) = [q for q in running.queries if q.name == "liveviews.activity"]
    deadline = time.monotonic() + timeout
    while (query.lastProgress or {}).get("eventTime", {}).get("watermark") != watermark:
        assert time.monotonic() < deadline, query.lastProgress
        time.sleep(0.05)


def _in_order(rng: random.Random, n: int, clock: int) -> tuple[list[dict[str, Any]], int]:
    """Chirp activity whose event times trail the newest by less than 30 s: late in neither
    form. Profiles are set often, some with an avatar, some taking it away."""
    events = Activity(users=8, seed=rng.randrange(1000)).take(n)
    for e in events:
        clock += rng.randint(0, 3_000)
        e["time"] = clock - rng.randint(0, 25_000)
        if rng.random() < 0.15:
            user = f"u{rng.randrange(8)}"
            profile = {"user": user, "name": f"{user} #{rng.randrange(99)}"}
            if rng.random() < 0.5:
                profile["avatar"] = f"{user}.png"
            e.update(type="profile_set", payload=profile)
    return events, clock


def test_profiles_and_activity_equal_their_processors_on_a_log_in_order(store, settings, spark):
    rng = random.Random(11)
    batches, clock = [], T0
    for size in (60, 90, 40, 120):
        batch, clock = _in_order(rng, size, clock)
        batches.append(batch)
    views = _run(store, settings, spark, batches)

    users = {k for v, k in views if v == "processor_profiles"}
    assert len(users) == 8
    for user in users:
        assert views[("profiles", user)] == views[("processor_profiles", user)], user
    assert not {k for v, k in views if v == "profiles"} - users

    old, new = views[("processor_activity", "global")], views[("activity", "global")]
    assert len(old) > 5 and sorted(new) == sorted(old)
    for at, row in old.items():
        assert row.pop("late") == {} and row.pop("late_total") == 0, at
        assert new[at] == row, at
    assert sum(r["total"] for r in new.values()) == sum(map(len, batches))


def _event(type_: str, user: str, time_ms: int) -> dict[str, Any]:
    if type_ == "profile_set":
        return {"type": type_, "payload": {"user": user, "name": user}, "time": time_ms}
    tweet = {"user": user, "tweet": f"{user}:{time_ms}", "text": "hi"}
    return {"type": type_, "payload": tweet, "time": time_ms}


def test_late_events_are_counted_apart_by_the_processor_and_dropped_by_spark_once_closed(
    store, settings, spark
):
    """One user's events (one partition). The first batch reaches minute 3: Spark's watermark
    is then 3:00 - 30 s = 2:30 for the next batch. There, an event of minute 0 (closed) is
    dropped by Spark; one of minute 2, 45 s behind the newest, is late for the processor but
    its window is still open for Spark; in the first batch, one 90 s behind the newest is late
    for the processor, and Spark, whose watermark moves only between micro-batches, counts it."""
    first = [_event("tweet_posted", "ann", T0 + s * 1000) for s in (5, 70, 150, 180)]
    first.append(_event("profile_set", "ann", T0 + 90_000))
    second = [
        _event("tweet_posted", "ann", T0 + 10_000),  # minute 0: closed for Spark
        _event("tweet_posted", "ann", T0 + 135_000),  # minute 2: open for Spark
    ]
    views = _run(store, settings, spark, [first, second], watermarks=(iso(T0 + 150_000),))
    old, new = views[("processor_activity", "global")], views[("activity", "global")]

    def at(minute: int) -> str:
        return iso(T0 + minute * MINUTE)

    assert old[at(0)]["counts"] == {"tweet_posted": 1}
    assert old[at(0)]["late"] == {"tweet_posted": 1}
    assert new[at(0)]["counts"] == {"tweet_posted": 1}  # the second one dropped
    assert old[at(1)]["late"] == {"profile_set": 1} and old[at(1)]["total"] == 1
    assert new[at(1)]["counts"] == {"tweet_posted": 1, "profile_set": 1}
    assert old[at(2)]["late"] == {"tweet_posted": 1} and old[at(2)]["total"] == 1
    assert new[at(2)]["counts"] == {"tweet_posted": 2} and new[at(2)]["total"] == 2
    assert old[at(3)] == {**new[at(3)], "late": {}, "late_total": 0}
    # The offline recomputation's rule, applied to where the micro-batches ended, agrees.
    counted = activity_counts(read_log(store, settings.log_partitions), activity_batches(store))
    assert {iso(start): c for start, c in counted.items()} == {
        k: w["counts"] for k, w in new.items()
    }


def test_an_event_dated_ahead_of_its_arrival_is_not_counted(store, settings, spark):
    """Spark's watermark follows the newest event time of the whole query: one event from the
    future would close every window before it. The declared view leaves it out; the events
    after it are still counted."""
    now = T0  # far behind the store's clock: every event arrived long after its time
    future = _event("tweet_posted", "bob", 253_402_300_000_000)  # year 9999
    views = _run(
        store, settings, spark,
        [[_event("tweet_posted", "ann", now), future], [_event("tweet_posted", "ann", now + 1)]],
    )  # fmt: skip
    new = views[("activity", "global")]
    assert list(new) == [iso(now)] and new[iso(now)]["total"] == 2


def test_the_declared_views_run_no_python_per_event(spark):
    events = spark.createDataFrame(
        [(0, "1-0", "profile_set", "u", '{"user": "u", "name": "U"}', 1, 1)], EVENT_SCHEMA
    )
    for build in (declared.profiles, declared.activity):
        plan = build(events, app)._jdf.queryExecution().executedPlan().toString()
        assert "Python" not in plan and "ArrowEval" not in plan, plan


def test_likes_stay_in_the_processor_since_spark_refuses_stacked_aggregations(spark):
    """A like counts each user once: each (tweet, user)'s last vote, then a count per tweet.
    Spark refuses the second aggregation over the first in update mode (its correctness check
    of stacked stateful operators): each changed (tweet, user) row would reach the count again,
    with nothing to take its previous vote back."""
    from pyspark.errors import AnalysisException

    votes = spark.readStream.format("rate").load().select(
        (F.col("value") % 3).alias("tweet"), (F.col("value") % 5).alias("user"),
        (F.col("value") % 2 == 0).alias("liked"), F.col("value").alias("position"),
    )  # fmt: skip
    last = votes.groupBy("tweet", "user").agg(F.max_by("liked", "position").alias("liked"))
    counted = last.groupBy("tweet").agg(F.count_if("liked").alias("likes"))
    with pytest.raises(AnalysisException, match="(?i)correctness.*stateful operation"):
        counted.writeStream.outputMode("update").format("noop").start().stop()
