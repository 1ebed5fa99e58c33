"""Pipeline figures: cold start to first delta, backlog drain rate, batch durations under load.

    .venv/bin/python -m bench.pipeline [--backlog 1000000] [--rate 100] [--seconds 60]

Runs against a fresh embedded store in a temporary directory; Spark in local mode.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import redis

from bench.common import percentile, save
from demo.chirp import app
from demo.chirp.generate import Activity
from streaming.changes import changes_stream, read_frontier
from streaming.embedded import EmbeddedStore
from streaming.events import log_stream
from streaming.log import EventLog
from streaming.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
PORT = 6431


def settings_for(url: str, data: Path) -> Settings:
    return Settings.from_env({"REDIS_URL": url, "LV_DATA_DIR": str(data)})


def log_heads(client: redis.Redis, partitions: int) -> dict[int, str]:
    heads = {}
    for p in range(partitions):
        last: Any = client.xrevrange(log_stream(p), count=1)
        if last:
            heads[p] = last[0][0].decode()
    return heads


def caught_up(client: redis.Redis, partitions: int) -> bool:
    frontier = read_frontier(client, "liveviews")
    return all(frontier.get(p) == h for p, h in log_heads(client, partitions).items())


def cold_start(url: str, data: Path, client: redis.Redis) -> float:
    """Seconds from launching ``python -m streaming`` to the first delta in the change topic."""
    EventLog(client, app, 4).append(
        {"type": "profile_set", "payload": {"user": "cold", "name": "C"}}
    )
    env = {**os.environ, "REDIS_URL": url, "LV_DATA_DIR": str(data / "cold")}
    t0 = time.monotonic()
    job = subprocess.Popen([sys.executable, "-m", "streaming"], cwd=ROOT, env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        while not any(client.exists(changes_stream(s)) for s in range(16)):
            if time.monotonic() - t0 > 120 or job.poll() is not None:
                raise RuntimeError("the pipeline produced no delta")
            time.sleep(0.02)
        return time.monotonic() - t0
    finally:
        job.terminate()
        job.wait(60)


def write_backlog(client: redis.Redis, n: int) -> float:
    log = EventLog(client, app, 4)
    activity = Activity(users=20_000, seed=1)
    t0 = time.monotonic()
    for _ in range(n // 5000):
        log.append_batch(activity.take(5000))
    return n / (time.monotonic() - t0)


def drain(spark: Any, settings: Settings, client: redis.Redis, n: int) -> dict[str, Any]:
    from streaming.job import start

    t0 = time.monotonic()
    query = start(spark, app, settings)
    while not caught_up(client, settings.log_partitions):
        if query.exception():
            raise RuntimeError(query.exception())
        time.sleep(0.2)
    elapsed = time.monotonic() - t0
    batches = [p for p in query.recentProgress if p["numInputRows"]]
    query.stop()
    processing = sum(p["durationMs"]["triggerExecution"] for p in batches) / 1000
    return {
        "events": n,
        "seconds_wall": round(elapsed, 1),
        "events_per_s_wall": round(n / elapsed),
        "events_per_s_in_batches": round(n / processing) if processing else None,
        "batches": len(batches),
    }


def steady(
    spark: Any, settings: Settings, client: redis.Redis, rate: int, seconds: int
) -> dict[str, Any]:
    from streaming.job import start

    query = start(spark, app, settings)
    log = EventLog(client, app, 4)
    activity = Activity(users=200, seed=9)
    while not caught_up(client, settings.log_partitions):
        time.sleep(0.1)
    start_t = time.monotonic()
    sent = 0
    while time.monotonic() - start_t < seconds:
        due = int((time.monotonic() - start_t) * rate)
        if due > sent:
            log.append_batch(activity.take(due - sent))
            sent = due
        time.sleep(0.005)
    time.sleep(3)
    durations = [p["durationMs"]["triggerExecution"] for p in query.recentProgress
                 if p["numInputRows"] and p["timestamp"]]  # fmt: skip
    query.stop()
    return {
        "rate_events_per_s": rate,
        "seconds": seconds,
        "batches": len(durations),
        "batch_ms_p50": percentile(durations, 50),
        "batch_ms_p99": percentile(durations, 99),
        "batch_ms_max": max(durations) if durations else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--backlog", type=int, default=1_000_000)
    parser.add_argument("--rate", type=int, default=100)
    parser.add_argument("--seconds", type=int, default=60)
    parser.add_argument("--name", default="pipeline")
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    figures: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="lv-bench-") as tmp:
        data = Path(tmp)
        with EmbeddedStore(data / "store", PORT) as url:
            client = redis.Redis.from_url(url, socket_timeout=60)
            figures["cold_start_to_first_delta_s"] = round(cold_start(url, data, client), 2)
            client.flushdb()
            from streaming.job import build_session

            spark = build_session(settings_for(url, data))
            spark.sparkContext.setLogLevel("ERROR")
            figures["append_events_per_s"] = round(write_backlog(client, args.backlog))
            figures["backlog"] = drain(
                spark, settings_for(url, data / "drain"), client, args.backlog
            )
            client.flushdb()
            figures["steady"] = steady(spark, settings_for(url, data / "steady"), client,
                                       args.rate, args.seconds)  # fmt: skip
            spark.stop()
    save(args.name, figures)


if __name__ == "__main__":
    main()
