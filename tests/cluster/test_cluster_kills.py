"""The pipeline on a Spark standalone cluster: a worker killed mid-stream, then the driver.

A master and two workers of one core each run as processes of their own (``deploy.spark``),
and their executors run a Python that has the project's dependencies but not the project
(``tests/support/sparkcluster.py``): the views' code reaches them only as the driver ships it.
``python -m liveviews.pipeline`` runs with ``SPARK_MASTER`` on that cluster over the run's store while
Chirp activity, bad entries among it, is appended to the log. A worker is SIGKILLed in the middle
of the stream: its executor exits, Spark runs its tasks on the other one, and a replacement
worker joins and gets an executor of its own. Then the driver's JVM is SIGKILLed and the
pipeline started again from its checkpoints. At the end every view must equal the offline
recomputation and the replay of the change topic, with no delta missing or duplicated, and
each bad entry must be a dead letter once.

``LV_FAULT_KILLS`` (default 1) cycles of both kills, ``LV_FAULT_SEED`` (default 1); the long
run: ``make test-cluster KILLS=5``.
"""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import redis

from deploy.spark import HOST, StandaloneCluster, Worker
from liveviews.log import deadletters
from tests.faults.harness import (
    PARTITIONS,
    SHARDS,
    Figures,
    Knobs,
    LogWriter,
    Pipeline,
    wait_caught_up,
    wait_for_progress,
)
from tests.support.checks import assert_views_consistent
from tests.support.processes import descendants
from tests.support.sparkcluster import WORKER_CORES, WORKER_MEMORY, WORKERS

KNOBS = Knobs.from_env(kills=1)
MAX_DELAY_S = 3.0
"""Kill within this many seconds of a batch: a few batches' time on two cores."""
BATCH = 20
BURST_BATCH = 400
"""Events per append (one every 0.1 s) in the seconds before a worker is killed."""


def test_the_executors_python_cannot_import_the_project(
    cluster: StandaloneCluster, executors_python: Path
) -> None:
    """What makes the next test mean something: where the executors run, the project's code is
    only what the driver ships."""
    worker = cluster.workers[0]

    def run(code: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(executors_python), "-c", code], cwd=worker.directory, env=cluster.env,
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip

    for package in ("liveviews", "demo"):
        found = run(f"import {package}")
        assert found.returncode != 0, f"the executors' Python imports {package} by itself"
        assert f"No module named '{package}'" in found.stderr
    deps = run("import pyspark, pyarrow, pandas, redis, orjson")
    assert deps.returncode == 0, deps.stderr


def every_worker_runs_an_executor(cluster: StandaloneCluster) -> bool:
    alive = cluster.alive_workers()
    return len(alive) == WORKERS and all(w["coresused"] == w["cores"] for w in alive)


def wait_for(what: str, predicate: object, pipeline: Pipeline, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        assert pipeline.alive(), f"the pipeline exited:\n{pipeline.tail()}"
        assert time.monotonic() < deadline, f"{what} within {timeout} s\n{pipeline.tail()}"
        time.sleep(0.2)


def python_cpu_ticks(pid: int) -> int:
    """The CPU time, in clock ticks, of the Python processes below ``pid`` (an executor's
    workers, below its worker's JVM)."""
    total = 0
    for child in descendants(pid):
        try:
            command = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")[0]
            stat = Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if b"python" in command:
            total += int(stat[11]) + int(stat[12])  # utime and stime
    return total


def wait_until_busy(pid: int, timeout: float) -> bool:
    """Until the Python workers below ``pid`` use most of a core: a view's task is running."""
    deadline = time.monotonic() + timeout
    before = python_cpu_ticks(pid)
    while time.monotonic() < deadline:
        time.sleep(0.05)
        now = python_cpu_ticks(pid)
        if now - before >= 3:  # 30 ms of CPU in 50 ms, at Linux's 100 ticks per second
            return True
        before = now
    return False


def tasks_cut_short(worker: Worker) -> int:
    """How many tasks the worker's executors had started and not finished (their logs say)."""
    cut = 0
    for log in worker.directory.glob("work/*/*/stderr"):
        text = log.read_text(errors="replace")
        started = set(re.findall(r"Running task .* \(TID (\d+)\)", text))
        cut += len(started - set(re.findall(r"Finished task .* \(TID (\d+)\)", text)))
    return cut


def kill_a_worker(
    cluster: StandaloneCluster, store: redis.Redis, pipeline: Pipeline, writer: LogWriter,
    delay: float,
) -> tuple[float, int]:  # fmt: skip
    """SIGKILL a worker mid-stream and start a replacement; returns the seconds from the kill
    to the next batch the same driver wrote, and how many tasks the kill cut short.

    The kill falls during a burst of writes, whose batches' tasks run long, as soon as the
    worker's executor is seen running one (its Python workers busy)."""
    victim = next(w for w in cluster.workers if w.alive)
    writer.batch = BURST_BATCH
    time.sleep(delay)
    wait_until_busy(victim.process.pid, timeout=10)
    before = store.xlen("lv:{m}:progress")
    cluster.kill_worker(victim)
    writer.batch = BATCH
    cut = tasks_cut_short(victim)
    t0 = time.monotonic()
    cluster.add_worker(WORKER_CORES, WORKER_MEMORY)
    wait_for_progress(store, before, pipeline)
    recovered = time.monotonic() - t0
    wait_for("the replacement worker runs an executor",
             lambda: every_worker_runs_an_executor(cluster), pipeline)  # fmt: skip
    return recovered, cut


@pytest.mark.timeout(300 + 240 * KNOBS.kills)
def test_a_worker_and_the_driver_killed_mid_stream(
    store: redis.Redis,
    store_url: str,
    tmp_path: Path,
    cluster: StandaloneCluster,
    executors_python: Path,
) -> None:
    rng = KNOBS.rng()
    figures = Figures("cluster_kills", {"seed": KNOBS.seed, "workers": WORKERS})
    pipeline = Pipeline(store_url, tmp_path)
    pipeline.env.pop("PYTHONPATH", None)
    pipeline.env.update(
        SPARK_MASTER=cluster.master_url,
        SPARK_LOCAL_IP=HOST,
        PYSPARK_PYTHON=str(executors_python),
    )
    writer = LogWriter(store, seed=KNOBS.seed, batch=BATCH, bad_every=3)
    t0 = time.monotonic()
    worker_recovery, driver_restart, cut_short = [], [], 0
    try:
        writer.start()
        pipeline.start()
        wait_for_progress(store, 0, pipeline, timeout=180)
        wait_for("every worker runs an executor", lambda: every_worker_runs_an_executor(cluster),
                 pipeline)  # fmt: skip
        for cycle in range(KNOBS.kills):
            recovered, cut = kill_a_worker(
                cluster, store, pipeline, writer, rng.uniform(0.5, MAX_DELAY_S)
            )
            worker_recovery.append(recovered)
            cut_short += cut
            assert pipeline.starts == cycle + 1, "a lost worker restarted the driver"
            time.sleep(rng.uniform(0, MAX_DELAY_S))
            assert pipeline.kill_jvm(), "the pipeline process outlived its killed driver"
            started = time.monotonic()
            pipeline.start()
            wait_for_progress(store, store.xlen("lv:{m}:progress"), pipeline, timeout=180)
            driver_restart.append(time.monotonic() - started)
        events = writer.stop()
        catch_up = wait_caught_up(store, pipeline)
    finally:
        writer.halt.set()
        pipeline.stop()
    lost = (tmp_path / "data" / "logs" / "pipeline.log").read_text(errors="replace")
    deltas = assert_views_consistent(store, PARTITIONS, SHARDS, skip=writer.undecodable)
    letters: Any = store.xrange(deadletters.ORDER_STREAM)
    recorded = [(f[b"pipeline"].decode(), f[b"offset"].decode()) for _, f in letters]
    assert len(recorded) == len(set(recorded)), "a dead letter was recorded twice"
    for name in ("entities", "profiles", "activity"):
        assert {o for p, o in recorded if p == name} == set(writer.undecodable), name
    figures.values.update(
        worker_kills=len(worker_recovery),
        driver_kills=len(driver_restart),
        executors_lost=lost.count("Lost executor"),
        tasks_cut_short_by_a_worker_kill=cut_short,
        events_written=events,
        deltas_checked=deltas,
        worker_kill_to_next_batch_s=round(max(worker_recovery), 1),
        driver_restart_to_first_batch_s=round(max(driver_restart), 1),
        catch_up_s=round(catch_up, 1),
        wall_s=round(time.monotonic() - t0, 1),
    )
    figures.print()
    assert events > 0 and deltas > 0 and writer.from_the_future
    # The driver saw each killed worker's executor go, and went on without restarting.
    assert lost.count("Lost executor") >= KNOBS.kills, lost[-3000:]
