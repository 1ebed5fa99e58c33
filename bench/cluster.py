"""Backlog drain on a Spark standalone cluster: the same backlog through ``local[2]``, one
worker of two cores, and two workers of one core each.

    .venv/bin/python -m bench.cluster [--quick] [--backlog 200000] [--runs 2]

Each variant runs ``python -m liveviews.pipeline`` as its own process over one embedded store
holding the backlog, from an empty change topic and checkpoint; the cluster variants start a master
and workers with ``deploy.spark`` first. The drain is timed from the start of the first
micro-batch (``lv:pipeline:progress``) to the moment every view has caught up with the log, so
the process's and the executors' start-up is reported apart. Variants alternate, ``--runs``
times each.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import redis

from bench import progress
from bench.ceilings import forget_views
from bench.common import Report, Row, free_port, percentile, save
from bench.moment import Moment
from bench.pipeline import write_backlog
from deploy.spark import HOST, StandaloneCluster
from liveviews.log.eventlog import views_caught_up
from liveviews.store.embedded import EmbeddedStore

ROOT = Path(__file__).resolve().parent.parent
PARTITIONS = 4
DRAIN_TIMEOUT_S = 900

VARIANTS: dict[str, list[int]] = {
    "local[2]": [],
    "one worker, 2 cores": [2],
    "two workers, 1 core each": [1, 1],
}
"""Each variant's workers, by the cores each offers; none: Spark's local mode."""


@contextmanager
def master_for(workers: list[int], root: Path) -> Iterator[str]:
    """``local[2]``, or the URL of a standalone cluster with these workers, stopped after."""
    if not workers:
        yield "local[2]"
        return
    with StandaloneCluster(root) as cluster:
        for cores in workers:
            cluster.add_worker(cores, f"{cores}g")
        cluster.wait_for_workers(len(workers))
        yield cluster.master_url


def first_batch_start_ms(client: redis.Redis) -> float:
    """When the earliest micro-batch recorded in ``lv:pipeline:progress`` started."""
    return min(b.started for b in progress.batches(client)) * 1000


def drain(url: str, master: str, data: Path, client: redis.Redis, events: int) -> dict[str, Any]:
    """One drain of the backlog by ``python -m liveviews.pipeline`` on ``master``."""
    forget_views(client)
    env = {
        **os.environ,
        "REDIS_URL": url,
        "SPARK_MASTER": master,
        "SPARK_LOCAL_IP": HOST,
        "PYSPARK_PYTHON": sys.executable,
        "LV_DATA_DIR": str(data),
        "LV_LOG_PARTITIONS": str(PARTITIONS),
        "LV_DRIVER_MEMORY": "2g",
    }
    data.mkdir(parents=True, exist_ok=True)
    launched_ms = time.time() * 1000
    with open(data.with_suffix(".log"), "wb") as out:
        pipeline = subprocess.Popen([sys.executable, "-m", "liveviews.pipeline"], cwd=ROOT, env=env,
                                    stdout=out, stderr=subprocess.STDOUT)  # fmt: skip
    try:
        deadline = time.monotonic() + DRAIN_TIMEOUT_S
        while not views_caught_up(client, PARTITIONS):
            if pipeline.poll() is not None or time.monotonic() > deadline:
                tail = data.with_suffix(".log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"the pipeline on {master} did not drain the backlog:\n{tail}")
            time.sleep(0.1)
        caught_up_ms = time.time() * 1000
    finally:
        pipeline.send_signal(signal.SIGTERM)
        try:
            pipeline.wait(60)
        except subprocess.TimeoutExpired:
            pipeline.kill()
            pipeline.wait()
    started_ms = first_batch_start_ms(client)
    seconds = (caught_up_ms - started_ms) / 1000
    return {
        "drain_s": round(seconds, 1),
        "events_per_s": round(events / seconds),
        "launch_to_first_batch_s": round((started_ms - launched_ms) / 1000, 1),
    }


def run(quick: bool = False, backlog: int = 200_000, runs: int = 2) -> Report:
    if quick:
        backlog, runs = 10_000, 1
    moment = Moment()
    figures: dict[str, Any] = {"events": backlog, "variants": {}}
    measured: dict[str, list[dict[str, Any]]] = {name: [] for name in VARIANTS}
    with tempfile.TemporaryDirectory(prefix="lv-bench-cluster-") as tmp:
        work = Path(tmp)
        with EmbeddedStore(work / "store", free_port()) as url:
            client = redis.Redis.from_url(url, socket_timeout=60)
            write_backlog(client, backlog)
            for i in range(runs):
                for n, (name, workers) in enumerate(VARIANTS.items()):
                    place = work / f"run{i}-{n}"
                    with master_for(workers, place / "cluster") as master:
                        result = drain(url, master, place / "data", client, backlog)
                    measured[name].append(result)
                    print(f"{name}: {result}", flush=True)
    for name, results in measured.items():
        rates = [r["events_per_s"] for r in results]
        figures["variants"][name] = {
            "workers_cores": VARIANTS[name],
            "events_per_s_median": percentile(rates, 50),
            "runs": results,
        }
    save("cluster", figures, moment)
    rows = []
    for name, v in figures["variants"].items():
        rates = [r["events_per_s"] for r in v["runs"]]
        starts = [r["launch_to_first_batch_s"] for r in v["runs"]]
        rows.append(Row(f"backlog drain, {backlog:,} Chirp events, {name}",
                        f"{v['events_per_s_median']:,} events/s (runs: {rates})",
                        baseline=f"launch to first batch: {starts} s"))  # fmt: skip
    return Report("cluster", "Backlog drain on a Spark standalone cluster",
                  "python -m bench.cluster", figures, rows, moment=moment.finish())  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--backlog", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=2)
    args = parser.parse_args()
    report = run(args.quick, args.backlog, args.runs)
    for row in report.rows:
        print(f"{row.figure}: {row.measured}; {row.baseline}")


if __name__ == "__main__":
    main()
