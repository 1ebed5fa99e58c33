"""Pipeline figures: cold start to the first delta served, backlog drain rate, batch durations
in steady state.

    .venv/bin/python -m bench.pipeline [--quick] [--backlog 1000000] [--rate 1000] [--seconds 60]

Cold start runs ``scripts/run.sh`` (what ``make run`` runs, with everything installed) in a
fresh data directory, and times it until an SSE subscriber receives the first delta of the
demo's seed. The drain and the steady state run the pipeline's queries on one local
SparkSession against a fresh embedded store.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import functools
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import redis

from bench import ceilings, declared
from bench.common import Report, Row, free_port, percentile, save, save_plot, token
from bench.moment import Moment
from demo.chirp import app
from demo.chirp.generate import Activity
from liveviews.app import App
from liveviews.log.eventlog import EventLog, views_caught_up
from liveviews.log.writer import LogWriter
from liveviews.pipeline.settings import Settings
from liveviews.store.embedded import EmbeddedStore

ROOT = Path(__file__).resolve().parent.parent


def settings_for(url: str, data: Path) -> Settings:
    # Micro-batches unless the run asks for Real-Time Mode (bench/__init__.py).
    return Settings.from_env(
        {"REDIS_URL": url, "LV_DATA_DIR": str(data), "LV_REALTIME": os.environ["LV_REALTIME"]}
    )


async def _first_delta(base: str, deadline: float) -> None:
    headers = {"Authorization": f"Bearer {token('alice')}"}
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline:
            try:
                url = f"{base}/v1/views/profiles/alice/live"
                async with session.get(url, headers=headers) as r:
                    event = b""
                    async for line in r.content:
                        if line.startswith(b"event:"):
                            event = line[6:].strip()
                        elif line.startswith(b"data:") and (
                            event == b"delta" or (event == b"snapshot" and b'"rows":{}' not in line)
                        ):
                            return
            except aiohttp.ClientError:
                await asyncio.sleep(0.05)
    raise RuntimeError("no delta was served")


COLD_STARTS = 3
"""Cold starts per variant, alternating: one start varies by ±1.5 s on the shared machine."""


COLD_VARIANTS: dict[str, dict[str, str]] = {
    "class_archive": {},  # as ``make run`` starts
    "no_class_archive": {"LV_CLASS_ARCHIVE": "off"},
    "no_python_launcher": {"LV_PYTHON_LAUNCHER": "off"},  # Spark's zipped PySpark imported
}
"""Cold starts measured in turn: the default, and the same-run baselines without the JVM class
archive, and without the launcher of Spark's Python processes
(liveviews.pipeline.tuning.pythonlauncher)."""


def cold_starts(data: Path, runs: int = COLD_STARTS) -> dict[str, Any]:
    """Cold starts of each of ``COLD_VARIANTS``, in turn ``runs`` times; medians and every run."""
    times: dict[str, list[float]] = {name: [] for name in COLD_VARIANTS}
    for i in range(runs):
        for name, env in COLD_VARIANTS.items():
            times[name].append(round(cold_start(data / f"{name}-{i}", env), 2))
    return {k: {"median_s": round(percentile(v, 50), 2), "runs_s": v} for k, v in times.items()}


def cold_start(data: Path, extra: dict[str, str] | None = None) -> float:
    """Seconds from ``scripts/run.sh`` to the first delta an SSE subscriber receives."""
    port = free_port()
    env = {**os.environ, "LV_DATA_DIR": str(data / "cold"), "LV_PORT": str(port),
           "LV_EMBEDDED_PORT": str(free_port()), **(extra or {})}  # fmt: skip
    env.pop("REDIS_URL", None)
    t0 = time.monotonic()
    run = subprocess.Popen(["bash", "scripts/run.sh"], cwd=ROOT, env=env, start_new_session=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        asyncio.run(_first_delta(f"http://127.0.0.1:{port}", t0 + 120))
        return time.monotonic() - t0
    finally:
        os.killpg(run.pid, signal.SIGINT)
        try:
            run.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait()


BACKLOG_BATCH = 5000


def append_backlog(log: LogWriter, n: int) -> float:
    """Append ``n`` Chirp events (20,000 users) to ``log`` in batches of ``BACKLOG_BATCH``:
    events/s."""
    activity = Activity(users=20_000, seed=1)
    t0 = time.monotonic()
    for _ in range(max(1, n // BACKLOG_BATCH)):
        log.append_batch(activity.take(min(BACKLOG_BATCH, n)))
    return n / (time.monotonic() - t0)


def write_backlog(client: redis.Redis, n: int) -> float:
    """``append_backlog`` to the store's streams."""
    return append_backlog(EventLog(client, app, 4), n)


def drain(
    spark: Any,
    settings: Settings,
    client: redis.Redis,
    n: int,
    application: App = app,
    caught_up: Callable[[], bool] | None = None,
) -> dict[str, Any]:
    """Drain the backlog of ``n`` events through ``application``'s pipelines: the time until
    ``caught_up`` (the views at every log partition's head in the store, by default)."""
    from liveviews.pipeline.versioning import start

    if caught_up is None:
        caught_up = functools.partial(views_caught_up, client, settings.log_partitions)
    t0 = time.monotonic()
    queries = start(spark, application, settings)
    while not caught_up():
        for query in queries:
            if query.exception():
                raise RuntimeError(query.exception())
        time.sleep(0.2)
    elapsed = time.monotonic() - t0
    per_query = {}
    for query in queries:
        batches = [p for p in query.recentProgress if p["numInputRows"]]
        per_query[query.name] = {
            "batches": len(batches),
            "seconds_in_batches": round(
                sum(p["durationMs"]["triggerExecution"] for p in batches) / 1000, 1
            ),
            "seconds_in_sink": round(
                sum(p["durationMs"].get("addBatch", 0) for p in batches) / 1000, 1
            ),  # fmt: skip
        }
        query.stop()
    return {
        "events": n,
        "seconds_wall": round(elapsed, 1),
        "events_per_s_wall": round(n / elapsed),
        "queries": per_query,
    }


def drain_ceilings(spark: Any, url: str, data: Path, client: redis.Redis, n: int) -> dict[str, Any]:
    """The same backlog through pipelines that do less than every view (``bench.ceilings``),
    each from an empty change topic, after the drain through every view: the JVM is warmer
    then, so if anything these bounds come out high."""
    out = {}
    for kind in ceilings.KINDS:
        ceilings.forget_views(client)
        settings = settings_for(url, data / f"ceiling-{kind}")
        out[kind] = drain(spark, settings, client, n, ceilings.app(kind))
    return out


def steady(
    spark: Any, settings: Settings, client: redis.Redis, rate: int, seconds: int
) -> dict[str, Any]:
    from liveviews.pipeline.versioning import start

    queries = start(spark, app, settings)
    log = EventLog(client, app, 4)
    activity = Activity(users=2000, seed=9)
    while not views_caught_up(client, settings.log_partitions):
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
    out: dict[str, Any] = {"rate_events_per_s": rate, "seconds": seconds}
    for query in queries:
        durations = [p["durationMs"]["triggerExecution"] for p in query.recentProgress
                     if p["numInputRows"]]  # fmt: skip
        query.stop()
        out[query.name] = {
            "batches": len(durations),
            "batch_ms_p50": percentile(durations, 50),
            "batch_ms_p99": percentile(durations, 99),
            "batch_ms_max": max(durations) if durations else None,
        }
    return out


def run(quick: bool = False, backlog: int = 1_000_000, rate: int = 1000, seconds: int = 60,
        name: str = "pipeline") -> Report:  # fmt: skip
    if quick:
        backlog, rate, seconds = 5_000, 100, 5
    moment = Moment()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    figures: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="lv-bench-") as tmp:
        data = Path(tmp)
        figures["cold_start"] = cold_starts(data, 1 if quick else COLD_STARTS)
        with EmbeddedStore(data / "store", free_port()) as url:
            client = redis.Redis.from_url(url, socket_timeout=60)
            from liveviews.pipeline.session import build_session

            spark = build_session(settings_for(url, data))
            spark.sparkContext.setLogLevel("ERROR")
            figures["append_events_per_s"] = round(write_backlog(client, backlog))
            figures["backlog"] = drain(spark, settings_for(url, data / "drain"), client, backlog)
            figures["ceilings"] = drain_ceilings(spark, url, data, client, backlog)
            for by in declared.GROUPINGS:
                ceilings.forget_views(client)
                figures[f"declared_by_{by}"] = drain(
                    spark, settings_for(url, data / f"declared-{by}"), client, backlog,
                    declared.app(by))  # fmt: skip
            # The same view in Spark's Real-Time Mode: one reader, one state partition.
            ceilings.forget_views(client)
            realtime = dataclasses.replace(settings_for(url, data / "declared-realtime"),
                                           realtime=True)  # fmt: skip
            figures["declared_realtime"] = drain(spark, realtime, client, backlog,
                                                 declared.app("key", realtime=True))  # fmt: skip
            client.flushdb()
            figures["steady"] = steady(spark, settings_for(url, data / "steady"), client,
                                       rate, seconds)  # fmt: skip
            spark.stop()
    save(name, figures, moment)
    back, steady_q = figures["backlog"], figures["steady"]
    cold = figures["cold_start"]
    rows = [
        Row("cold start: scripts/run.sh to the first delta served (median)",
            f"{cold['class_archive']['median_s']} s (runs: {cold['class_archive']['runs_s']})",
            "<= 15 s",
            f"without the class archive: {cold['no_class_archive']['median_s']} s "
            f"(runs: {cold['no_class_archive']['runs_s']}); Spark's Python processes importing"
            f" its zipped PySpark: {cold['no_python_launcher']['median_s']} s "
            f"(runs: {cold['no_python_launcher']['runs_s']})"),
        Row(f"backlog drain, {back['events']:,} Chirp events through every view",
            f"{back['events_per_s_wall']:,} events/s ({back['seconds_wall']} s)",
            ">= 100,000 events/s"),
        *[Row(f"backlog drain, same backlog: a view declared as a query, each group's count "
              f"and newest type, no Python per event (bench.declared), grouped by "
              f"{declared.GROUPINGS[by]}",
              f"{figures[f'declared_by_{by}']['events_per_s_wall']:,} events/s "
              f"({figures[f'declared_by_{by}']['seconds_wall']} s)", ">= 50,000 events/s",
              "by the log's key: the same aggregation as Spark's own bound below"
              if by == "key" else "the payload parse on top")
          for by in declared.GROUPINGS],
        Row("backlog drain, same backlog: the view grouped by the log's key in Real-Time Mode "
            "(one reader, one state partition)",
            f"{figures['declared_realtime']['events_per_s_wall']:,} events/s "
            f"({figures['declared_realtime']['seconds_wall']} s)", "",
            f"in micro-batches (above): {figures['declared_by_key']['events_per_s_wall']:,}"
            " events/s; the frontier moves at each epoch's end (5 s)"),
        *[Row(f"drain bound, same backlog: {ceilings.KINDS[kind]}",
              f"{c['events_per_s_wall']:,} events/s ({c['seconds_wall']} s)")
          for kind, c in figures["ceilings"].items()],
        Row("appending validated events to the log", f"{figures['append_events_per_s']:,}/s"),
    ]  # fmt: skip
    for query, q in steady_q.items():
        if isinstance(q, dict):
            rows.append(
                Row(
                    f"{query}: micro-batch at {rate} events/s, p50 / p99 / max",
                    f"{q['batch_ms_p50']} / {q['batch_ms_p99']} / {q['batch_ms_max']} ms",
                )
            )
    return Report("pipeline", "Pipeline throughput and cold start", "python -m bench.pipeline",
                  figures, rows, [plot_drain(figures)], moment=moment.finish())  # fmt: skip


def plot_drain(figures: dict[str, Any]) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    backlog = figures["backlog"]
    queries = backlog["queries"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3.5))
    names = list(queries)
    sink = [queries[q]["seconds_in_sink"] for q in names]
    other = [queries[q]["seconds_in_batches"] - queries[q]["seconds_in_sink"] for q in names]
    left.barh(names, sink, label="operators and sink (addBatch)")
    left.barh(names, other, left=sink, label="planning, offsets, commit")
    left.set_xlabel(f"seconds in batches, draining {backlog['events']:,} events")
    left.legend(loc="lower right", fontsize=8)
    bounds = figures["ceilings"]
    labels = ["every view", *[ceilings.KINDS[k] for k in bounds]]
    rates = [backlog["events_per_s_wall"], *[c["events_per_s_wall"] for c in bounds.values()]]
    right.barh([label.replace(" and ", "\nand ") for label in labels], rates)
    right.axvline(100_000, color="red", linestyle="--", label="target: 100,000 events/s")
    right.xaxis.set_major_formatter(lambda x, _: f"{x / 1000:.0f}k")
    right.set_xlabel("events/s, same backlog, same run")
    right.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    return save_plot(fig, "pipeline_drain")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--backlog", type=int, default=1_000_000)
    parser.add_argument("--rate", type=int, default=1000)
    parser.add_argument("--seconds", type=int, default=60)
    args = parser.parse_args()
    run(args.quick, args.backlog, args.rate, args.seconds)


if __name__ == "__main__":
    main()
