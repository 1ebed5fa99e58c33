"""What ``bench.rebuild`` measures besides latency: each window's CPU (the machine's, the
driver JVM's, the store's, the builders'), the store's long calls, and the queries'
micro-batches."""

from __future__ import annotations

import contextlib
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import psutil
import redis

from bench import progress
from bench.common import percentile
from bench.moment import CpuTimes
from bench.system import System
from liveviews.pipeline.session import QUERY_NAME

LAUNCHER = "org.apache.spark.launcher.Main"
LONG_CALL_US = 5000
"""A store call at least this long is counted in its window: the store serves one call at a
time, so every other client (the serving sink, the gateway's feeds) waits behind it."""


@dataclass
class Window:
    """A stretch of the run: its samples are the renames posted in it."""

    name: str
    start: float  # monotonic
    wall_start: float
    cpu: CpuTimes
    jvm_cpu_s: float
    store_cpu_s: float
    ours: dict[int, float]
    end: float = 0.0
    wall_end: float = 0.0
    busy_pct: float = 0.0
    jvm_cores: float = 0.0
    """The driver JVM's CPU in the window, in cores."""
    store_cores: float = 0.0
    """The store's CPU in the window (``INFO cpu``), in cores: its share of ``ours_cores``."""
    ours_cores: float = 0.0
    """The CPU of this benchmark's processes (store, pipeline, gateway, clients), in cores;
    the rest of the machine's busy time is other people's."""
    builder_cores: float = 0.0
    """Of ``ours_cores``, the processes building a version apart
    (``liveviews.pipeline.builder``)."""
    batches: dict[str, Any] = field(default_factory=dict)
    """Each query's micro-batches that ended in the window (``window_batches``), read at its
    end: the progress stream keeps only the newest entries."""
    long_calls: dict[str, Any] = field(default_factory=dict)
    """The store's calls of at least ``LONG_CALL_US`` in the window (``long_calls``)."""


def driver_jvm(system: System, timeout: float = 60) -> int:
    """The pipeline's driver JVM, once it runs: the process first runs ``java -version``, and
    Spark's launcher a short-lived JVM that writes the driver's command line."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pid = system.driver_jvm()
        with contextlib.suppress(psutil.Error):
            command = psutil.Process(pid).cmdline() if pid else []
            if pid and command[-1:] == ["pyspark-shell"] and LAUNCHER not in command:
                return pid
        time.sleep(0.1)
    raise RuntimeError(f"the pipeline's JVM did not start; see {system.data / 'pipeline.log'}")


def tree_cpu() -> tuple[dict[int, float], set[int]]:
    """CPU seconds so far of this process and each of its descendants, by pid; and which of
    them build a version apart (``liveviews.pipeline.builder``: the child, its JVM and workers)."""
    me = psutil.Process()
    out, builders = {}, set()
    for process in [me, *me.children(recursive=True)]:
        with contextlib.suppress(psutil.Error):
            times = process.cpu_times()
            out[process.pid] = times.user + times.system
            if "--build" in process.cmdline():
                builders |= {process.pid, *(c.pid for c in process.children(recursive=True))}
    return out, builders


def long_calls(client: redis.Redis, seconds: float, building: str) -> dict[str, Any]:
    """The store's calls of at least ``LONG_CALL_US`` since the last look (its slow log, read
    and emptied), and how long they held the store: in all, and those that wrote a version
    being built (a key of theirs names its namespace)."""
    entries: Any = client.slowlog_get(-1)
    client.slowlog_reset()
    ms = [e["duration"] / 1000 for e in entries]
    mark = building.encode()
    built = [e["duration"] / 1000 for e in entries if mark and mark in e["command"]]
    return {
        "calls": len(ms),
        "held_pct": round(sum(ms) / 10 / max(seconds, 1e-9), 1),
        "p50_ms": percentile(ms, 50) if ms else 0,
        "max_ms": max(ms, default=0),
        "building_calls": len(built),
        "building_held_pct": round(sum(built) / 10 / max(seconds, 1e-9), 1),
        "building_max_ms": max(built, default=0),
    }


def window_batches(client: redis.Redis, since: float, until: float) -> dict[str, Any]:
    """Per query: its micro-batches that ended in the window, and where their time went."""
    per_query: dict[str, list[progress.Batch]] = defaultdict(list)
    for b in progress.batches(client, since, until):
        if b.events > 0:
            per_query[b.query].append(b)
    out = {}
    for query, batches in sorted(per_query.items()):
        total = [float(b.duration_ms.get("triggerExecution", 0)) for b in batches]
        sink = [float(b.duration_ms.get("addBatch", 0)) for b in batches]
        out[query] = {
            "batches": len(batches),
            "events": sum(b.events for b in batches),
            "batch_ms_p50": percentile(total, 50),
            "batch_ms_p99": percentile(total, 99),
            "batch_ms_max": max(total),
            "add_batch_ms_p50": percentile(sink, 50),
            "add_batch_ms_max": max(sink),
        }
    return out


def query_batches(client: redis.Redis, qualified: str, until: float) -> dict[str, Any]:
    """The micro-batches of a version's query up to ``until``, and when its first one began."""
    name = f"{QUERY_NAME}.{qualified}"
    batches = [b for b in progress.batches(client, 0, until + 5)
               if b.query == name and b.events > 0]  # fmt: skip
    if not batches:
        return {"first_batch_started": None, "batches": 0}
    total = [float(b.duration_ms.get("triggerExecution", 0)) for b in batches]
    return {
        "first_batch_started": batches[0].started,
        "batches": len(batches),
        "events": sum(b.events for b in batches),
        "events_per_batch_max": max(b.events for b in batches),
        "batch_ms_p50": percentile(total, 50),
        "batch_ms_max": max(total),
    }
