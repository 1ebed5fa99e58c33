"""Declared views in Spark's Real-Time Mode (``liveviews.pipeline.realtime``), end to end.

The shop's two declared views of ``tests/streaming/pipeline/test_declared.py`` (a count with
latest-by-offset in the DataFrame API, latest-by-offset in Spark SQL) run in Real-Time Mode
through the JVM source and writer on the run's SparkSession and a real store: the stored views
must equal a recomputation in Python and a replay of the change topic, whose deltas arrive one
per change, before the epoch that holds them ends; a query stopped in the middle of an epoch
and started again (over what a crash leaves of a first epoch) must neither repeat a delta nor
show an older value again, and must end the epoch it runs again without waiting out its
interval.
"""

from __future__ import annotations

import random
import time
from typing import Any

import pytest
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from liveviews import App, Integer, Schema, String
from liveviews.changes.cuts import CUT_SCRIPT, cut_args, cut_keys, cut_of
from liveviews.changes.topic import (
    WANTS_STREAM,
    history_stream,
    read_deltas,
    read_frontier,
    read_snapshot,
    realtime_attempts_key,
)
from liveviews.client.offsets import covers
from liveviews.log.eventlog import EventLog
from liveviews.log.events import Offset
from liveviews.pipeline import versions
from liveviews.pipeline.declared import payloads, sql, view_changes
from liveviews.pipeline.plan import PipelineRefused
from liveviews.pipeline.queries import checkpoint_of, sink_client, start_pipeline
from tests.faults.harness import wait_until
from tests.streaming.pipeline import test_declared as shop
from tests.support.checks import replayed_views, stored_views
from tests.support.pipeline import RunningPipeline


def realtime_shop(interval: str) -> App:
    """The shop's views, declared to run in Real-Time Mode with epochs ``interval`` long."""
    app = App("shop", event_types=shop.app.event_types)
    for view in shop.app.views.values():
        app.views[view.name] = view
    # One state partition each: both queries' tasks (a reader and a state partition) then fit
    # the run's local[4] at once.
    for name, view, build in (("likes", "like_counts", shop.likes),
                              ("orders", "open_orders", shop.orders)):  # fmt: skip
        app.pipeline(name, views=[view], realtime=True, trigger_interval=interval, partitions=1,
                     version="rt1")(build)  # fmt: skip
    return app


def _likes(rng: random.Random, n: int) -> list[dict[str, Any]]:
    """``n`` likes of four tweets by nine users."""
    return [{"type": "like", "payload": {"user": f"u{rng.randrange(9)}", "tweet": f"t{rng.randrange(4)}"}}
            for _ in range(n)]  # fmt: skip


def test_realtime_views_equal_a_recomputation_through_several_epochs(store, settings, spark):
    rng = random.Random(11)
    app = realtime_shop("2 seconds")
    log = EventLog(store, app, settings.log_partitions)
    running = RunningPipeline(spark, settings, app)
    written: list[dict[str, Any]] = []
    try:
        for size in (40, 60, 80):
            batch = shop._events(rng, size)
            log.append_batch(batch)
            written += batch
            running.wait_until_caught_up(store, timeout=90)
    finally:
        running.stop()
    expected = shop._recompute(written)
    assert stored_views(store, settings.change_shards) == expected
    replayed, deltas = replayed_views(store, settings.change_shards, streamed=("likes", "orders"))
    assert replayed == expected and deltas > 0


def test_changes_arrive_within_an_epoch_and_a_replayed_epoch_repeats_none(store, settings, spark):
    """Likes only, so each tweet's count only grows: a delta that showed a smaller count after
    a larger one would be an older value shown again."""
    likes = _likes(random.Random(5), 60)
    log = EventLog(store, shop.app, settings.log_partitions)
    # A first run whose epoch outlasts the test: its changes must arrive without it ending.
    running = RunningPipeline(spark, settings, realtime_shop("10 minutes"))
    try:
        log.append_batch(likes[:40])
        expected = shop._recompute(likes[:40])
        wait_until("the views took the first likes",
                   lambda: stored_views(store, settings.change_shards) == expected)  # fmt: skip
        # The epoch has not ended, so the frontier has not moved: the changes came as they were
        # made, not with a checkpoint.
        assert read_frontier(store, "likes") == {}
    finally:
        running.stop()  # in the middle of the epoch: Spark runs it again from its start
    # The writer recorded that it started the epoch, which the next run then runs again.
    assert store.smembers(realtime_attempts_key("likes", 0))
    # What a driver killed as the first epoch ends leaves: the offset log entry's temporary
    # copy, on which Spark would refuse every start (liveviews.pipeline.checkpoint).
    checkpoint = checkpoint_of(settings, "likes")
    assert (checkpoint / "metadata").exists() and not (checkpoint / "offsets" / "0").exists()
    (checkpoint / "offsets").mkdir(exist_ok=True)
    (checkpoint / "offsets" / ".0.5e7a.tmp").write_text("v1\n")
    # A stopped query's tasks end with it, even a reader blocked in a 10-minute epoch: they
    # would hold task slots the next run's queries need.
    wait_until("the stopped queries' tasks ended", lambda: _running_tasks(spark) == 0, timeout=30)
    running = RunningPipeline(spark, settings, realtime_shop("10 minutes"))
    try:
        # The epoch run again ends once it has read the log as it was when it started, not
        # after its 10 minutes: the changes it held are written, and its frontier covers them.
        running.wait_until_caught_up(store, timeout=90)
        frontier = read_frontier(store, "likes")
        # The next epoch is an ordinary one: its changes arrive as they are made.
        log.append_batch(likes[40:])
        expected = shop._recompute(likes)
        wait_until("the views took the later likes",
                   lambda: stored_views(store, settings.change_shards) == expected)  # fmt: skip
        assert read_frontier(store, "likes") == frontier
    finally:
        running.stop()
    # Epoch 0, stopped in the first run, was the one run again and committed in the second.
    assert [int(f[b"batch"]) for _, f in store.xrange(history_stream("likes"), count=1)] == [0]
    assert stored_views(store, settings.change_shards) == expected
    replayed, _ = replayed_views(store, settings.change_shards, streamed=("likes", "orders"))
    assert replayed == expected
    assert_like_counts_only_grew(store, settings.change_shards)


def _running_tasks(spark: Any) -> int:
    tracker = spark.sparkContext._jsc.sc().statusTracker()
    return sum(e.numRunningTasks() for e in tracker.getExecutorInfos())


def assert_like_counts_only_grew(store: Any, shards: int) -> None:
    """Each tweet's like counts, in the order the change topic sent them, never went back nor
    repeated (with likes only, a count that did was an older value shown again)."""
    counts: dict[str, list[int]] = {}
    for shard in range(shards):
        for d in read_deltas(store, shard):
            for op in d.ops:
                counts.setdefault(d.key, []).append(op["value"]["likes"])
    for tweet, seen in counts.items():
        assert seen == sorted(set(seen)), f"{tweet}: counts went back or repeated: {seen}"


def test_changes_made_while_the_store_is_busy_go_together_in_its_next_call(store, settings, spark):
    """The writer keeps taking changes while a call is answered and sends them together
    (``ChangeTopicQueue``): with the store's writes paused, a burst of likes of 600 tweets
    (600 row changes) reaches the store in a few calls, not one each, and every change lands."""
    likes = [{"type": "like", "payload": {"user": "u1", "tweet": f"t{i}"}} for i in range(600)]
    log = EventLog(store, shop.app, settings.log_partitions)
    running = RunningPipeline(spark, settings, realtime_shop("10 minutes"))
    try:
        warm = _likes(random.Random(2), 5)
        log.append_batch(warm)
        wait_until("the views took the first likes",
                   lambda: stored_views(store, settings.change_shards) == shop._recompute(warm))  # fmt: skip
        store.config_resetstat()
        log.append_batch(likes)
        store.execute_command("CLIENT", "PAUSE", 4000, "WRITE")  # the writer's call waits
        expected = shop._recompute(warm + likes)
        wait_until("the views took the burst",
                   lambda: stored_views(store, settings.change_shards) == expected)  # fmt: skip
        calls = store.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0)
    finally:
        store.execute_command("CLIENT", "UNPAUSE")
        running.stop()
    assert 0 < calls <= 60, f"{calls} calls for 600 row changes"
    replayed, _ = replayed_views(store, settings.change_shards, streamed=("likes", "orders"))
    assert replayed == expected


def _covers(frontier: dict[int, str], wanted: dict[str, str]) -> bool:
    return covers({str(p): at for p, at in frontier.items()},
                  [Offset(int(p), at) for p, at in wanted.items()])  # fmt: skip


def test_a_client_waiting_for_its_write_ends_the_epoch_early(store, settings, spark):
    """``reflects()`` on a view in Real-Time Mode: the gateway tells the positions waited for
    on ``WANTS_STREAM`` (``liveviews.gateway.feed.wants``), and the source ends its epoch once
    past them, so the frontier covers the write long before the epoch's interval; a want met
    once ends no later epoch."""
    likes = _likes(random.Random(8), 30)
    log = EventLog(store, shop.app, settings.log_partitions)
    running = RunningPipeline(spark, settings, realtime_shop("10 minutes"))
    try:
        offsets = log.append_batch(likes)
        expected = shop._recompute(likes)
        wait_until("the views took the likes",
                   lambda: stored_views(store, settings.change_shards) == expected)  # fmt: skip
        assert read_frontier(store, "likes") == {}  # a 10-minute epoch, not over
        wanted: dict[str, str] = {}
        for o in offsets:  # an event's offset is its partition's newest so far
            wanted[str(o.partition)] = o.id
        store.xadd(WANTS_STREAM, wanted)  # type: ignore[arg-type]
        wait_until("the frontier covers the write",
                   lambda: _covers(read_frontier(store, "likes"), wanted), timeout=60)  # fmt: skip
        query = next(q for q in spark.streams.active if q.name.endswith(".likes"))
        ended = len(query.recentProgress)
        time.sleep(3)
        assert len(query.recentProgress) == ended, "a want already met ended another epoch"
    finally:
        running.stop()


def _python_udf(app: App, events: DataFrame) -> DataFrame:
    doubled = F.udf(lambda total: total * 2, "long")
    rows = payloads(events, app, "order").select("order", doubled("total").alias("total"))
    return view_changes(rows, "orders", key="order")


def _union_of_two_types(app: App, events: DataFrame) -> DataFrame:
    rows = sql(events, app, "SELECT `order`, total FROM `order` "
                            "UNION ALL SELECT `order`, paid AS total FROM payment")  # fmt: skip
    return view_changes(rows.groupBy("order").agg(F.sum("total").alias("total")), "orders",
                        key="order")  # fmt: skip


def _latest_total(app: App, events: DataFrame) -> DataFrame:
    rows = (
        payloads(events, app, "order")
        .groupBy("order")
        .agg(F.max_by("total", "position").alias("total"))
    )
    return view_changes(rows, "orders", key="order")


REFUSED = {
    "Python per event": (
        _python_udf, {},
        r"pipeline 'orders' cannot run: Spark cannot run its query in Real-Time Mode: its plan "
        r"runs Python code per event \(ArrowEvalPythonExec\), which that mode does not\. To run "
        r"it, declare it without realtime=True, and it runs in micro-batches\.",
    ),
    "one source read twice": (
        _union_of_two_types, {},
        r"pipeline 'orders' cannot run: Spark cannot run its query in Real-Time Mode: it joins "
        r"or unions two reads of the events, which that mode refuses\. To run it, read the event "
        r"types together",
    ),
    "more slots than the master": (
        _latest_total, {"partitions": 8},
        r"pipeline 'orders' cannot run: in Real-Time Mode its query needs 9 task slots at once "
        r"\(1 to read the log, 8 for its state partitions\), and the master has 4",
    ),
    "an epoch shorter than Spark allows": (
        _latest_total, {"trigger_interval": "100 milliseconds"},
        r"pipeline 'orders' cannot run: Spark cannot run its query in Real-Time Mode: its "
        r"trigger_interval is 100 ms, and that mode checkpoints at most every 1000 ms\. To run "
        r"it, declare a trigger_interval of at least 1 s\.",
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", list(REFUSED))
def test_a_query_real_time_mode_cannot_run_is_refused_with_a_sentence(case, spark, settings):
    build, declared, sentence = REFUSED[case]
    app = App("plans")
    app.event_type("order", Schema({"order": String(), "total": Integer()}), lambda p: p["order"])
    app.event_type("payment", Schema({"order": String(), "paid": Integer()}), lambda p: p["order"])
    app.view("orders", description="each order")
    app.pipeline("orders", views=["orders"], realtime=True, **declared)(
        lambda events: build(app, events)
    )
    before = {q.name for q in spark.streams.active}
    with pytest.raises(PipelineRefused, match=sentence) as refused:
        start_pipeline(spark, app, settings, "orders", sink_client(settings))
    assert "\n" not in refused.value.message and refused.value.code == "pipeline_refused"
    assert {q.name for q in spark.streams.active} == before


def test_a_realtime_pipeline_is_rebuilt_beside_its_serving_version(store, settings, spark):
    """``liveviews rebuild`` of a pipeline in Real-Time Mode: the new version reads the log from
    offset 0 in the mode too, readers move to it once it has caught up, and it keeps up."""
    rng = random.Random(3)
    app = App("shop", event_types=shop.app.event_types)
    app.views["like_counts"] = shop.app.views["like_counts"]
    # One pipeline: it and its version being built hold all of the run's local[4] at once.
    app.pipeline("likes", views=["like_counts"], realtime=True, trigger_interval="1 second",
                 partitions=1, version="rt1")(shop.likes)  # fmt: skip
    log = EventLog(store, app, settings.log_partitions)
    written = [e for e in shop._events(rng, 200) if e["type"] != "order"]
    running = RunningPipeline(spark, settings, app)
    try:
        log.append_batch(written[:40])
        running.wait_until_caught_up(store, timeout=90)
        running.rebuild(store, "likes", timeout=120)
        log.append_batch(written[40:])
        running.wait_until_caught_up(store, timeout=90)
    finally:
        running.stop()
    active = versions.read(store, "likes")
    assert active is not None and active.active is not None and active.active.namespace
    expected = shop._recompute(written)
    assert expected
    for (view, key), rows in expected.items():
        served = read_snapshot(store, view, key, settings.change_shards, active.active.namespace)
        assert served.rows == rows, key


def test_an_epoch_ends_exactly_at_a_cut_for_its_pipeline(store, settings, spark):
    """A cut for the pipeline (``liveviews.changes.cuts``, appended as the gateway appends one
    for a group of views) ends the epoch exactly there, however long the epoch's interval, and
    the events after it go to the next epoch, which the next cut ends; a cut for another
    pipeline ends none."""
    likes = _likes(random.Random(9), 60)
    log = EventLog(store, shop.app, settings.log_partitions)
    running = RunningPipeline(spark, settings, realtime_shop("10 minutes"))
    keys = cut_keys(settings.log_partitions)

    def cut(pipeline: str) -> dict[str, str]:
        made, _, _ = cut_of(store.eval(CUT_SCRIPT, len(keys), *keys, *cut_args([pipeline])))
        return dict(made.positions)

    try:
        log.append_batch(likes[:30])
        wait_until("the views took the first likes",
                   lambda: stored_views(store, settings.change_shards) == shop._recompute(
                       likes[:30]))  # fmt: skip
        cut("orders")  # another pipeline's: no epoch of this one ends at it
        first = cut("likes")
        log.append_batch(likes[30:])
        wait_until("the epoch ended at the cut",
                   lambda: read_frontier(store, "likes") != {}, timeout=60)  # fmt: skip
        assert read_frontier(store, "likes") == {int(p): at for p, at in first.items()}
        second = cut("likes")
        wait_until("the next epoch ended at the next cut",
                   lambda: read_frontier(store, "likes") == {
                       int(p): at for p, at in second.items()}, timeout=60)  # fmt: skip
        assert stored_views(store, settings.change_shards) == shop._recompute(likes)
    finally:
        running.stop()
