"""The streaming query against the real log: views and deltas as events arrive."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import time

from demo.chirp import app
from demo.chirp.generate import Activity, seed_events
from liveviews.changes.topic import read_deltas, read_frontier, read_snapshot, shard_for
from liveviews.log.eventlog import EventLog
from liveviews.log.events import entry_id_tuple
from tests.support.checks import assert_views_consistent
from tests.support.reference import read_log

NOW = 1_767_225_600_000


def test_views_follow_the_log(store, settings, pipeline):
    log = EventLog(store, app, settings.log_partitions)
    offsets = log.append_batch(seed_events(NOW))
    pipeline.wait_until_caught_up(store)

    timeline = read_snapshot(store, "timeline", "alice", settings.change_shards)
    assert sorted(timeline.rows) == ["bob:seed0", "carol:seed1"]
    assert timeline.rows["bob:seed0"]["likes"] == 2
    assert timeline.rows["bob:seed0"]["name"] == "Bob Dylan"
    frontier = read_frontier(store, "liveviews")
    for off in offsets:
        assert entry_id_tuple(frontier[off.partition]) >= entry_id_tuple(off.id)

    # A rename reaches the author's tweets and every follower's timeline, as one delta each.
    before = timeline.position
    log.append({"type": "profile_set", "payload": {"user": "bob", "name": "Robert"}})
    pipeline.wait_until_caught_up(store)
    shard = shard_for("timeline", "alice", settings.change_shards)
    deltas = [d for d in read_deltas(store, shard, after=before) if d.key == "alice"]
    assert len(deltas) == 1 and deltas[0].view == "timeline"
    assert deltas[0].ops == [
        {
            "op": "upsert",
            "row": "bob:seed0",
            "value": {**timeline.rows["bob:seed0"], "name": "Robert"},
        }
    ]
    tweet = read_snapshot(store, "tweets", "bob:seed0", settings.change_shards)
    assert tweet.rows["tweet"]["name"] == "Robert"

    # Unfollow takes the followee's tweets off the timeline.
    log.append({"type": "unfollow", "payload": {"user": "alice", "followee": "bob"}})
    pipeline.wait_until_caught_up(store)
    timeline = read_snapshot(store, "timeline", "alice", settings.change_shards)
    assert sorted(timeline.rows) == ["carol:seed1"]
    assert_views_consistent(store, settings.log_partitions, settings.change_shards)


def test_many_small_batches_match_recomputation(store, settings, pipeline):
    log = EventLog(store, app, settings.log_partitions)
    activity = Activity(users=12, seed=3)
    for _ in range(6):
        log.append_batch(activity.take(150))
        pipeline.wait_until_caught_up(store)
    deltas = assert_views_consistent(store, settings.log_partitions, settings.change_shards)
    assert deltas > 100
    # Some events arrived more than 30 s behind an earlier one of their partition: whether
    # Spark's watermark dropped them depends on where the micro-batches were cut, which the
    # recomputation reads.
    log = read_log(store, settings.log_partitions)
    assert any(e.time_ms < max(x.time_ms for x in part[:i]) - 30_000
               for part in log for i, e in enumerate(part) if i)  # fmt: skip


def test_checkpoint_files_are_written_through_the_file_system_api(store, settings, spark, pipeline):
    """Each batch writes its offset and commit logs, through Hadoop's FileSystem API: on a
    local disk its FileContext API starts a process per path check (``liveviews.pipeline.queries``). The
    manager checked is the one Spark picks for each pipeline's checkpoint."""
    from liveviews.pipeline.queries import checkpoint_of

    EventLog(store, app, settings.log_partitions).append_batch(seed_events(NOW))
    pipeline.wait_until_caught_up(store)
    jvm = spark._jvm
    conf = spark._jsparkSession.sessionState().newHadoopConf()
    manager = jvm.org.apache.spark.sql.execution.streaming.checkpointing.CheckpointFileManager
    for name in app.pipelines:
        checkpoint = checkpoint_of(settings, name)
        for log_dir in ("offsets", "commits"):
            path = checkpoint / log_dir
            deadline = time.monotonic() + 30  # a batch's commit follows its sink's writes
            while not any(p.name.isdigit() for p in path.iterdir()):
                assert time.monotonic() < deadline, (name, log_dir, sorted(path.iterdir()))
                time.sleep(0.05)
        chosen = manager.create(jvm.org.apache.hadoop.fs.Path(str(checkpoint)), conf)
        assert chosen.getClass().getSimpleName() == "FileSystemBasedCheckpointFileManager", name


def test_each_pipeline_query_runs_its_own_count_of_state_partitions(store, settings, pipeline):
    """Chirp's activity state has one key, and profiles declares one state partition (as in
    Real-Time Mode, where each holds a task slot), so their queries run one stateful task per
    batch; the entities query runs LV_SHUFFLE_PARTITIONS. Spark records the count in each
    batch's offset log entry, and a query keeps the one its checkpoint was created with."""
    import orjson

    from liveviews.pipeline.queries import checkpoint_of

    EventLog(store, app, settings.log_partitions).append_batch(seed_events(NOW))
    pipeline.wait_until_caught_up(store)
    shuffle = str(settings.shuffle_partitions)
    expected = {"entities": shuffle, "profiles": "1", "activity": "1"}
    assert {name: p.partitions for name, p in app.pipelines.items()} == {
        "entities": None, "profiles": 1, "activity": 1,
    }  # fmt: skip
    for name, count in expected.items():
        offsets = checkpoint_of(settings, name) / "offsets"
        first = min((p for p in offsets.iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
        metadata = orjson.loads(first.read_text().splitlines()[1])
        assert metadata["conf"]["spark.sql.shuffle.partitions"] == count, name


def test_each_pipeline_query_runs_on_its_own_trigger_interval(pipeline):
    """Chirp's activity pipeline declares micro-batches 2 s apart; entities and profiles,
    without one, run on LV_TRIGGER_INTERVAL (back to back by default)."""
    triggers = {
        q.name: q._jsq.streamingQuery().trigger().intervalMs() for q in pipeline.queries
    }  # fmt: skip
    assert triggers == {
        "liveviews.entities": 0, "liveviews.profiles": 0, "liveviews.activity": 2000,
    }  # fmt: skip


def test_a_trigger_interval_is_a_number_and_a_unit() -> None:
    import pytest

    from liveviews.app import App
    from liveviews.errors import ConfigurationError

    other = App("t")
    other.view("v")
    for wrong in ["2s", "soon", "1.5 seconds", "2 hours", ""]:
        with pytest.raises(ConfigurationError, match="such as '2 seconds'"):
            other.pipeline("p", views=["v"], trigger_interval=wrong)
    other.pipeline("p", views=["v"], trigger_interval="500 milliseconds")(lambda events: events)
    assert other.pipelines["p"].trigger_interval == "500 milliseconds"


def test_no_pipeline_takes_the_name_of_the_views_frontier(spark, settings) -> None:
    """``liveviews`` names the frontier every view reflects, beside each pipeline's own."""
    import pytest

    from liveviews.app import App
    from liveviews.errors import ConfigurationError
    from liveviews.pipeline.versioning import start

    other = App("t")
    other.view("v")
    other.pipeline("liveviews", views=["v"])(lambda events: events)
    with pytest.raises(ConfigurationError, match="the frontier of every view; rename it"):
        start(spark, other, settings)


def test_a_pipeline_needs_at_least_one_partition() -> None:
    import pytest

    from liveviews.app import App
    from liveviews.errors import ConfigurationError

    other = App("t")
    other.view("v")
    with pytest.raises(ConfigurationError, match="at least one partition, not 0"):
        other.pipeline("p", views=["v"], partitions=0)


def _imports(module: str, *libraries: str) -> list[str]:
    """Which of ``libraries`` a fresh Python process has imported once it imports ``module``."""
    probe = f"import sys, {module}; print(*[m for m in {libraries!r} if m in sys.modules])"
    imported = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                              check=True)  # fmt: skip
    return imported.stdout.split()


def test_the_log_source_starts_without_pandas_or_the_store_client() -> None:
    # Spark starts a fresh Python process for the source's schema, its offsets and its read
    # planning, each of which imports the source; pandas would add ~0.25 s to each start, and
    # the store's client library ~0.1 s to the two that never read.
    assert _imports("liveviews.pipeline.source", "pandas", "redis") == []


def test_the_views_load_without_the_store_client() -> None:
    # Each Python worker of a stateful operator, and its schema check at the first batch,
    # imports the application's views; none of them appends to the log.
    assert _imports("demo.chirp.views", "redis") == []


def test_each_micro_batch_is_recorded_in_the_progress_stream(spark, store, settings, pipeline):
    """The listener appends which query ran which batch, with how many events and where its
    time went; starting the pipelines again on the same session adds no second listener."""
    import orjson

    from liveviews.pipeline.progress import PIPELINE_PROGRESS_STREAM
    from liveviews.pipeline.versioning import start

    EventLog(store, app, settings.log_partitions).append_batch(seed_events(NOW))
    pipeline.wait_until_caught_up(store)
    deadline = time.monotonic() + 30
    seen: dict[str, dict] = {}
    while time.monotonic() < deadline and len(seen) < 3:
        for _, fields in store.xrange(PIPELINE_PROGRESS_STREAM):
            if int(fields[b"events"]) > 0:
                seen[fields[b"query"].decode()] = fields
        time.sleep(0.1)
    assert sorted(seen) == ["liveviews.activity", "liveviews.entities", "liveviews.profiles"]
    for fields in seen.values():
        durations = orjson.loads(fields[b"duration_ms"])
        assert durations["triggerExecution"] >= durations["addBatch"] > 0
        assert int(fields[b"batch"]) >= 0
    listeners = len(spark._jsparkSession.streams().listListeners())
    pipeline.stop()
    again = start(spark, app, settings)
    try:
        assert len(spark._jsparkSession.streams().listListeners()) == listeners
    finally:
        for query in again:
            query.stop()


def _quiet_processor():
    """A stateful processor that keeps nothing and changes nothing. Its class is defined here,
    not at module level, so that Spark's Python workers get it by value instead of importing
    the test module."""
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor

    class Quiet(StatefulProcessor):
        def init(self, handle):
            pass

        def handleInputRows(self, key, rows, timerValues):
            return iter([])

        def close(self):
            pass

    return Quiet()


def _counting_app(row_based: bool):
    from liveviews import App
    from liveviews.pipeline.views import CHANGE_SCHEMA

    counting = App("counting")
    counting.event_types = app.event_types
    counting.view("counts")

    @counting.pipeline("counts", views=["counts"])
    def counts(events):
        grouped = events.groupBy("key")
        if row_based:
            return grouped.transformWithState(_quiet_processor(), CHANGE_SCHEMA, "Update", "None")
        return grouped.transformWithStateInPandas(
            _quiet_processor(), CHANGE_SCHEMA, "Update", "None"
        )

    return counting


def test_a_checkpoint_of_other_stateful_operators_says_how_to_start_again(spark, store, settings):
    """A checkpoint written by another shape of a pipeline (here Spark's pandas operator, then
    its row-based one) fails the query, with an error saying which checkpoint it is; the
    pipeline process then rebuilds the pipeline as a new version instead of stopping."""
    from liveviews.log.eventlog import views_caught_up
    from liveviews.pipeline.__main__ import query_failed
    from liveviews.pipeline.versioning import start

    log = EventLog(store, app, settings.log_partitions)
    log.append_batch(seed_events(NOW))
    first = start(spark, _counting_app(row_based=False), settings)
    try:
        deadline = time.monotonic() + 60
        while not views_caught_up(store, settings.log_partitions):
            assert first[0].exception() is None and time.monotonic() < deadline
            time.sleep(0.1)
    finally:
        first[0].stop()
    log.append_batch(seed_events(NOW + 1000))
    second = start(spark, _counting_app(row_based=True), settings)
    try:
        deadline = time.monotonic() + 60
        while second[0].isActive and time.monotonic() < deadline:
            time.sleep(0.1)
        failures = [str(second[0].exception())] if second[0].exception() else []
    finally:
        second[0].stop()
    assert len(failures) == 1
    error = query_failed("liveviews.counts", failures[0], settings)
    assert error.code == "checkpoint_mismatch"
    assert str(settings.checkpoint_dir / "counts") in error.message
    assert "make clean-data" in error.message
    plain = query_failed("liveviews.counts", "[DIVIDE_BY_ZERO] Division by zero.", settings)
    assert plain.code == "pipeline_failed"

    # The pipeline process does not stop on it: readers keep the served views while the
    # pipeline is rebuilt from the log as a new version, which then replaces it.
    from liveviews.changes.topic import ACTIVE_KEY
    from liveviews.pipeline import versions
    from liveviews.pipeline.__main__ import is_checkpoint_mismatch
    from liveviews.pipeline.versioning import start_versions

    # The version being built reads short micro-batches, so that the serving versions'
    # batches find a free task slot (docs/performance/rebuild.md).
    cap = 5
    capped = dataclasses.replace(settings, rebuild_max_events_per_batch=cap)
    versioning = start_versions(spark, _counting_app(row_based=True), capped)
    try:
        deadline = time.monotonic() + 60
        while versioning.queries["counts"].isActive and time.monotonic() < deadline:
            time.sleep(0.1)
        assert is_checkpoint_mismatch(str(versioning.queries["counts"].exception()))
        assert versioning.rebuild_unrunnable("counts")
        (building,) = versioning.running.values()
        assert building.max_events == cap and building.building  # and its store calls short
        deadline = time.monotonic() + 90
        while store.hget(ACTIVE_KEY, "counts") is None or not views_caught_up(
            store, settings.log_partitions
        ):
            versioning.tick()
            assert time.monotonic() < deadline
            time.sleep(0.1)
        reg = versions.read(store, "counts")
        assert reg is not None and reg.active is not None and reg.active.namespace
        assert list(versioning.queries) == [f"counts{reg.active.namespace}"]
        sizes = [p["numInputRows"] for p in building.query.recentProgress]
        assert max(sizes) <= cap and sum(sizes) == 2 * len(seed_events(NOW)), sizes
        # A restart, after a set-aside batch say, starts the query with the same cap.
        building.query.stop()
        versioning.restart(f"counts{reg.active.namespace}")
        restarted = versioning.running[f"counts{reg.active.namespace}"]
        assert restarted.max_events == cap and restarted.building
    finally:
        for q in versioning.queries.values():
            q.stop()


def _most_tasks_in_a_stage(spark, query) -> int:
    """The largest task count of any stage the query's micro-batches ran (Spark runs a query's
    jobs under its run id as job group)."""
    tracker = spark.sparkContext.statusTracker()
    counts = [0]
    for job in tracker.getJobIdsForGroup(str(query.runId)):
        info = tracker.getJobInfo(job)
        for stage in info.stageIds if info else []:
            stage_info = tracker.getStageInfo(stage)
            counts.append(stage_info.numTasks if stage_info else 0)
    return max(counts)


def test_views_follow_the_log_read_by_spark_tasks(spark, store, settings):
    """With LV_READ_TASKS, Spark tasks read the log on executors instead of the driver: the
    activity query, whose state is one partition, then runs a stage of two read tasks."""
    import dataclasses

    from liveviews.log.eventlog import views_caught_up
    from liveviews.pipeline.versioning import start

    tasks = dataclasses.replace(settings, read_tasks=2)
    queries = start(spark, app, tasks)
    try:
        log = EventLog(store, app, settings.log_partitions)
        offsets = log.append_batch(seed_events(NOW))
        log.append_batch(Activity(users=12, seed=5).take(150))
        deadline = time.monotonic() + 60
        while not views_caught_up(store, settings.log_partitions):
            assert all(q.exception() is None for q in queries) and time.monotonic() < deadline
            time.sleep(0.1)
        frontier = read_frontier(store, "liveviews")
        for off in offsets:
            assert entry_id_tuple(frontier[off.partition]) >= entry_id_tuple(off.id)
        assert_views_consistent(store, settings.log_partitions, settings.change_shards)
        activity = next(q for q in queries if q.name == "liveviews.activity")
        assert _most_tasks_in_a_stage(spark, activity) == 2
    finally:
        for query in queries:
            query.stop()


def _socket_probe():
    """A stateful processor that emits the address family of its link to the state server."""
    from pyspark.sql import Row
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor

    class SocketProbe(StatefulProcessor):
        def init(self, handle):
            self.family = handle._statefulProcessorApiClient._client_socket.family.name

        def handleInputRows(self, key, rows, timerValues):
            yield Row(family=self.family)

        def close(self):
            pass

    return SocketProbe()


def test_stateful_operators_reach_the_state_server_over_a_unix_socket(spark):
    """Each state access is a round trip between a Python worker and the JVM; the session
    makes those over Unix domain sockets, which cost less than TCP on the loopback."""
    keys = spark.createDataFrame([("a",), ("b",)], "key string")
    rows = (
        keys.groupBy("key")
        .transformWithState(_socket_probe(), "family string", "Update", "None")
        .collect()
    )
    assert {r.family for r in rows} == {"AF_UNIX"}


def test_operators_run_without_whole_stage_code_generation(spark):
    """The session plans no stage as generated Java source: compiling each stage in a cold
    JVM held back every start, and the pipeline's work is not in Spark's own operators."""
    counts = spark.range(100).selectExpr("id % 3 AS k").groupBy("k").count()
    assert sorted(r["count"] for r in counts.collect()) == [33, 33, 34]
    plan = counts._jdf.queryExecution().executedPlan().toString()  # the final plan, once run
    assert "isFinalPlan=true" in plan and "HashAggregate" in plan
    assert "*(" not in plan, plan  # a stage compiled as one generated class prints as *(n)


def _freeze_count(_rows):
    import gc

    yield gc.get_freeze_count()


def test_python_workers_keep_what_they_imported_out_of_later_collections(spark):
    """Spark reuses a Python worker for task after task and collects its garbage in full
    between two of them. The session's worker daemon freezes what a worker holds after its
    first task, so those collections no longer walk PySpark's, pyarrow's and the views'
    objects again each time."""
    one_task = spark.sparkContext.parallelize([0], 1)
    seen = [one_task.mapPartitions(_freeze_count).collect()[0] for _ in range(6)]
    # Six tasks one after the other on at most one worker per core: some run on a worker
    # that has run one before.
    assert max(seen) > 1000, seen
