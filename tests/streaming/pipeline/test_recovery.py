"""Crash and restart: views and the change topic stay exactly-once.

After every fault the views must equal an offline recomputation from the whole log, and
replaying the change topic must rebuild them with no delta missing or duplicated.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from demo.chirp import app
from demo.chirp.generate import Activity
from liveviews.changes.topic import ACTIVE_KEY, read_frontier
from liveviews.log.eventlog import EventLog
from liveviews.pipeline import versions
from tests.support.checks import assert_served_views_consistent, assert_views_consistent
from tests.support.pipeline import RunningPipeline
from tests.support.processes import spark_jvm

ROOT = Path(__file__).resolve().parents[3]


class Writer(threading.Thread):
    """Appends small batches of events until stopped."""

    def __init__(self, log: EventLog, activity: Activity) -> None:
        super().__init__(daemon=True)
        self.log, self.activity = log, activity
        self.halt = threading.Event()
        self.written = 0

    def run(self) -> None:
        while not self.halt.is_set():
            self.log.append_batch(self.activity.take(20))
            self.written += 20
            time.sleep(0.01)

    def stop(self) -> int:
        self.halt.set()
        self.join()
        return self.written


def test_stop_mid_stream_and_restart(store, settings, spark):
    log = EventLog(store, app, settings.log_partitions)
    writer = Writer(log, Activity(users=15, seed=11))
    first = RunningPipeline(spark, settings)
    try:
        writer.start()
        time.sleep(6)
    finally:
        first.stop()  # in the middle of the stream, writes going on
    time.sleep(1)
    second = RunningPipeline(spark, settings)
    try:
        time.sleep(4)
        assert writer.stop() > 200
        second.wait_until_caught_up(store)
    finally:
        writer.halt.set()
        second.stop()  # a query left running would write into the next test's store
    assert_views_consistent(store, settings.log_partitions, settings.change_shards)


def test_replayed_batch_changes_nothing(store, settings, spark):
    """A batch whose sink write landed but whose commit did not is replayed, and skipped."""
    log = EventLog(store, app, settings.log_partitions)
    activity = Activity(users=10, seed=5)
    running = RunningPipeline(spark, settings)
    try:
        log.append_batch(activity.take(300))
        running.wait_until_caught_up(store)
    finally:
        running.stop()
    # As if the driver died between each query's sink and its commit. The last batch is read
    # once the queries have stopped: a query with a watermark (activity) plans a batch without
    # data a trigger after its last one, so a batch read while it runs may not stay the last.
    last: dict[str, int] = {}
    for name in app.pipelines:
        commits = settings.checkpoint_dir / name / "commits"
        offsets = settings.checkpoint_dir / name / "offsets"
        last[name] = max(int(p.name) for p in offsets.iterdir() if p.name.isdigit())
        (commits / str(last[name])).unlink(missing_ok=True)  # absent: the stop cut it short
        (commits / f".{last[name]}.crc").unlink(missing_ok=True)
    deltas_before = assert_views_consistent(store, settings.log_partitions, settings.change_shards)
    replay = RunningPipeline(spark, settings)
    try:
        for name, batch in last.items():
            commit = settings.checkpoint_dir / name / "commits" / str(batch)
            deadline = time.monotonic() + 60
            while not commit.exists() and time.monotonic() < deadline:
                replay.assert_running()
                time.sleep(0.1)
            assert commit.exists(), f"the uncommitted batch {batch} of {name} was not replayed"
        log.append_batch(activity.take(50))
        replay.wait_until_caught_up(store)
    finally:
        replay.stop()
    deltas_after = assert_views_consistent(store, settings.log_partitions, settings.change_shards)
    assert deltas_after >= deltas_before


def test_a_rebuild_asked_by_hand_resumes_after_a_restart(store, settings, spark):
    """``liveviews rebuild`` of a pipeline whose code did not change, cut short by a stop: the
    next start runs the new version on from its checkpoint beside the serving one (it is not
    dropped as built for other code), and readers are switched to it once it has caught up."""
    log = EventLog(store, app, settings.log_partitions)
    activity = Activity(users=10, seed=7)
    log.append_batch(activity.take(400))
    # Short micro-batches and a switch left to the operator: the stop comes mid-rebuild.
    manual = dataclasses.replace(settings, rebuild_max_events_per_batch=20,
                                 rebuild_switch="manual")  # fmt: skip
    first = RunningPipeline(spark, manual)
    try:
        first.wait_until_caught_up(store)
        versions.ask(store, "entities", "rebuild")
        deadline = time.monotonic() + 60
        while (
            (asked := versions.read(store, "entities")) is None
            or asked.next is None
            or not read_frontier(store, asked.next.qualified("entities"))
        ):
            first.versioning.tick()
            assert time.monotonic() < deadline, "the rebuild did not begin"
            time.sleep(0.05)
    finally:
        first.stop()
    assert asked.active is not None and asked.next is not None
    log.append_batch(activity.take(50))
    second = RunningPipeline(spark, settings)
    try:
        assert versions.read(store, "entities") == asked  # neither dropped nor begun again
        assert asked.next.qualified("entities") in second.versioning.running
        deadline = time.monotonic() + 120
        while store.hget(ACTIVE_KEY, "entities") != asked.next.namespace.encode():
            second.versioning.tick()
            second.assert_running()
            assert time.monotonic() < deadline, "readers were not switched to the rebuilt version"
            time.sleep(0.05)
        second.wait_until_caught_up(store)
    finally:
        second.stop()
    assert_served_views_consistent(store, app, settings.log_partitions, settings.change_shards)


def _start_job(settings) -> subprocess.Popen[bytes]:
    out = open(settings.data_dir.parent / "job.log", "ab")  # noqa: SIM115 - the child owns it
    env = {
        **os.environ,
        "REDIS_URL": settings.store_url,
        "LV_DATA_DIR": str(settings.data_dir),
        "LV_CHECKPOINT_DIR": str(settings.checkpoint_dir),
        "LV_LOG_PARTITIONS": str(settings.log_partitions),
        "LV_CHANGE_SHARDS": str(settings.change_shards),
        "PYSPARK_PYTHON": sys.executable,
    }
    return subprocess.Popen(
        [sys.executable, "-m", "liveviews.pipeline"], cwd=ROOT, env=env,
        stdout=out, stderr=subprocess.STDOUT,
    )  # fmt: skip


@pytest.mark.timeout(300)
def test_sigkill_spark_jvm_and_restart(store, settings):
    log = EventLog(store, app, settings.log_partitions)
    writer = Writer(log, Activity(users=15, seed=23))
    job = _start_job(settings)
    try:
        writer.start()
        probe = RunningPipelineProbe(settings)
        probe.wait_for_progress(store)  # killed while batches are flowing
        os.kill(spark_jvm(job.pid), signal.SIGKILL)
        job.wait(60)
        job = _start_job(settings)
        time.sleep(2)
        assert writer.stop() > 100
        probe.wait_until_caught_up(store, timeout=120)
    finally:
        writer.halt.set()
        job.send_signal(signal.SIGTERM)
        try:
            job.wait(30)
        except subprocess.TimeoutExpired:
            job.kill()
    assert_views_consistent(store, settings.log_partitions, settings.change_shards)


class RunningPipelineProbe(RunningPipeline):
    """Watches a pipeline running in another process, through the store only."""

    def __init__(self, settings) -> None:  # noqa: D107 - no query of our own
        self.settings = settings

    @property
    def queries(self) -> list:
        return [_NoQuery()]

    def wait_for_progress(self, client, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if client.xlen("lv:{m}:progress") >= 2:
                return
            time.sleep(0.1)
        raise AssertionError("the pipeline made no progress")


class _NoQuery:
    def exception(self) -> None:
        return None
