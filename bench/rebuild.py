"""A rebuild beside the live pipeline: 1M events rebuilt while readers are served at 100/s.

    .venv/bin/python -m bench.rebuild [--quick] [--backlog 1000000] [--rate 100]
        [--before 30] [--lead-in 150] [--pipelines profiles,entities,activity]
        [--env LV_MAX_EVENTS_PER_BATCH=10000] [--live-env LV_MAX_EVENTS_PER_BATCH=2000]
        [--log redis|kafka|redis,kafka] [--name rebuild]

The whole system runs as ``make run`` runs it (store, pipeline process, gateway). A fresh store
takes the backlog of Chirp events on the log's fast path (with ``--log kafka``: a Kafka node of
the run's own takes it, in a transaction per batch of 5,000, and the gateway and the pipeline
run with ``LV_KAFKA``; writes ``rebuild_kafka.json``), and the pipeline process drains it:
that is the serving version. Then Chirp users rename themselves through the gateway's ``POST
/v1/events`` at a fixed rate, as in ``bench.latency``, while an SSE subscriber of each user's
``profiles`` and one of ``activity/global`` (the views those renames change) record what they
are shown. After a lead-in of those writes (150 s: the serving JVM's first minutes after the
drain are slower than it stays) and a first window, an operator asks for a rebuild of each
pipeline in turn (``liveviews.pipeline.versions.ask``): the new version is built from offset 0
beside the serving one, which keeps serving and keeping up; readers switch when
``lv:{m}:active`` changes, and the replaced version's state is deleted after
``LV_REBUILD_GRACE_SECONDS``.

A rename's latency is from just before its POST to the frame that shows it (a delta, or the
snapshot after a reset), and each falls in the window its POST was sent in: before any rebuild,
while a pipeline is rebuilt, after its switch (until its old state is deleted), and at the end.
Each window also records the machine's busy CPU and each query's micro-batches. At the end the
writes stop, and every subscriber's rows must equal the snapshot of the version now serving.

``--env`` sets the pipeline process's settings for the whole run; ``--live-env`` restarts it
with more once it has drained the backlog, so that they apply to the rebuilds and not to the
first drain (a window then lets the new JVM warm up before the first one is measured). Both
serve to try settings that could keep readers' latency within bounds while a rebuild runs
(docs/performance/rebuild.md).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import redis.asyncio as aioredis

from bench import progress
from bench.common import RESULTS, Report, save, store_cpu_s
from bench.latency import USERS, latency_stats, publish, seed
from bench.moment import CpuTimes, Moment
from bench.pipeline import append_backlog
from bench.rebuildreaders import Reader, Renames, subscribe
from bench.rebuildreport import plot_timeline, rows
from bench.rebuildstats import (
    LONG_CALL_US,
    Window,
    driver_jvm,
    long_calls,
    query_batches,
    tree_cpu,
    window_batches,
)
from bench.system import System, jvm_cpu, running_store
from demo.chirp import app
from liveviews.changes.topic import ACTIVE_KEY, read_snapshot
from liveviews.pipeline import versions
from liveviews.pipeline.settings import Settings

PIPELINES = ["profiles", "entities", "activity"]
"""Rebuilt one after the other: ``profiles`` serves the view whose latency is measured (its
readers are those of the version being replaced), ``entities`` (likes, tweets, timelines) is the
largest state beside it on the same cores, ``activity`` another query every 2 s."""
CHUNK_S = 5.0
"""The writer posts in runs of this many seconds, so that it can stop between two of them."""
SETTLE_S = 10.0
"""How long each window after a switch goes on once the replaced version's state is deleted."""
POLL_S = 0.02
CORES = os.cpu_count() or 1
REBUILD_TIMEOUT_S = 1800.0
SLOWEST_EVENTS_PER_S = 2_000
"""A drain or rebuild slower than this is stuck: a larger backlog waits longer than
``REBUILD_TIMEOUT_S`` (10M events: 5,000 s)."""


def timeout_for(backlog: int) -> float:
    return max(REBUILD_TIMEOUT_S, backlog / SLOWEST_EVENTS_PER_S)


LEAD_IN_S = 150.0


class Run:
    """The writer, the subscribers and the windows of one run against a running system."""

    def __init__(self, system: System, rate: int, settle_s: float, timeout_s: float) -> None:
        self.system = system
        self.timeout_s = timeout_s
        self.renames = Renames(rate)
        self.settle_s = settle_s
        self.windows: list[Window] = []
        self.store = aioredis.Redis.from_url(system.store_url)
        self.jvm = driver_jvm(system)
        self.writing = True
        self.seen: dict[int, float] = {}
        """The CPU seconds last read of every process of ours, those that ended since too."""
        self.builders: set[int] = set()
        self.sampled = 0.0
        self.building = ""
        """The namespace of the version being built (``@<version>``), once it has begun."""
        client = system.client
        client.config_set("slowlog-log-slower-than", LONG_CALL_US)
        client.config_set("slowlog-max-len", 100_000)
        client.slowlog_reset()

    def sample(self) -> None:
        """Read our processes' CPU at most once a second, so that a process that ends within a
        window (a builder, after its hand-over) still counts in it."""
        if time.monotonic() - self.sampled < 1.0:
            return
        self.sampled = time.monotonic()
        cpu, builders = tree_cpu()
        self.seen.update(cpu)
        self.builders |= builders

    def mark(self, name: str) -> None:
        """End the current window, and begin the one called ``name`` (if any)."""
        now, wall, cpu = time.monotonic(), time.time(), CpuTimes.now()
        jvm = jvm_cpu(self.jvm)["cpu_s"]
        store = store_cpu_s(self.system.client)
        self.sampled = 0.0
        self.sample()
        ours = dict(self.seen)
        if self.windows:
            last = self.windows[-1]
            last.end, last.wall_end = now, wall
            seconds = max(now - last.start, 1e-9)
            last.busy_pct = cpu.shares_since(last.cpu)["busy_pct"]
            last.jvm_cores = round((jvm - last.jvm_cpu_s) / seconds, 2)
            last.store_cores = round((store - last.store_cpu_s) / seconds, 2)
            used = {pid: v - last.ours.get(pid, 0.0) for pid, v in ours.items()}
            last.ours_cores = round(sum(used.values()) / seconds, 2)
            apart = sum(v for pid, v in used.items() if pid in self.builders)
            last.builder_cores = round(apart / seconds, 2)
            last.long_calls = long_calls(self.system.client, seconds, self.building)
            last.batches = window_batches(self.system.client, last.wall_start, wall)
        if name:
            self.windows.append(Window(name, now, wall, cpu, jvm, store, ours))

    async def write(self, session: aiohttp.ClientSession) -> None:
        run = 0
        while self.writing:
            await publish(session, self.system.base, self.renames, CHUNK_S, f"w{run}x")
            run += 1

    def alive(self) -> None:
        pipeline = self.system.pipeline
        if pipeline is not None and pipeline.poll() is not None:
            raise RuntimeError(f"the pipeline exited; see {self.system.data / 'pipeline.log'}")

    async def until(self, what: str, predicate: Any, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not await predicate():
            self.alive()
            self.sample()
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what} did not happen within {timeout:.0f} s")
            await asyncio.sleep(POLL_S)

    async def registry(self, pipeline: str) -> versions.Versions | None:
        raw: Any = await self.store.hget(versions.REGISTRY_KEY, pipeline)
        return versions.Versions.decode(pipeline, raw) if raw else None

    async def rebuild(self, pipeline: str) -> dict[str, Any]:
        """Ask for a rebuild of ``pipeline`` and follow it until its old state is deleted."""
        before = await self.store.hget(ACTIVE_KEY, pipeline)
        self.mark(f"rebuilding {pipeline}")
        asked = time.monotonic()
        await asyncio.to_thread(versions.ask, self.system.client, pipeline, "rebuild")

        async def begun() -> bool:
            reg = await self.registry(pipeline)
            return reg is not None and reg.next is not None

        await self.until(f"the rebuild of {pipeline}", begun, 60)
        begun_at = time.monotonic()
        reg = await self.registry(pipeline)
        assert reg is not None and reg.next is not None
        version = reg.next
        self.building = f"@{version.version}"

        async def switched() -> bool:
            return bool(await self.store.hget(ACTIVE_KEY, pipeline) != before)

        await self.until(f"the switch of {pipeline}", switched, self.timeout_s)
        switch_at, switch_wall = time.monotonic(), time.time()
        in_log = await asyncio.to_thread(self.system.log_positions)
        self.mark(f"after the switch of {pipeline}")
        self.building = ""

        async def deleted() -> bool:
            reg = await self.registry(pipeline)
            return reg is not None and not reg.retired

        await self.until(f"the deletion of {pipeline}'s old version", deleted, self.timeout_s)
        deleted_at = time.monotonic()
        await asyncio.sleep(self.settle_s)
        batches = query_batches(self.system.client, version.qualified(pipeline), switch_wall)
        first = batches["first_batch_started"]
        return {
            "pipeline": pipeline,
            "version": version.version,
            "events_in_log_at_switch": in_log,
            "request_to_begun_s": round(begun_at - asked, 2),
            "request_to_switch_s": round(switch_at - asked, 1),
            "first_batch_to_switch_s": round(switch_wall - first, 1) if first else None,
            "events_per_s_from_request": round(in_log / (switch_at - asked)),
            "events_per_s_from_first_batch": round(in_log / (switch_wall - first))
            if first else None,
            "switch_to_old_state_deleted_s": round(deleted_at - switch_at, 1),
            "new_version_batches": {k: v for k, v in batches.items() if k != "first_batch_started"},
        }  # fmt: skip

    async def drive(self, plan: Plan) -> dict[str, Any]:
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=connector) as session:
            readers = [Reader("profiles", f"u{u}") for u in range(USERS)]
            readers.append(Reader("activity", "global"))
            tasks = [asyncio.create_task(subscribe(session, self.system.base, r, self.renames))
                     for r in readers]  # fmt: skip
            await asyncio.wait_for(asyncio.gather(*(r.ready.wait() for r in readers)), 60)
            writer = asyncio.create_task(self.write(session))
            if plan.lead_in_s > 0 or plan.live_env:
                self.mark("lead-in after the restart" if plan.live_env else
                          "lead-in after the drain")  # fmt: skip
                await asyncio.sleep(max(plan.lead_in_s, plan.before_s if plan.live_env else 0))
            self.mark("before the rebuilds")
            await asyncio.sleep(plan.before_s)
            rebuilds = [await self.rebuild(p) for p in plan.pipelines]
            self.mark("after every rebuild")
            await asyncio.sleep(plan.before_s)
            self.writing = False
            self.mark("")
            await writer
            await asyncio.to_thread(self.system.wait_until_caught_up, 120)
            await asyncio.sleep(3)  # the last deltas on their way to the subscribers
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        await self.store.aclose()
        return {"rebuilds": rebuilds, "readers": self.compare(readers)}

    def compare(self, readers: list[Reader]) -> dict[str, Any]:
        """Per view: the resets each subscriber was sent, and whether its rows are the
        snapshot of the version serving now."""
        client = self.system.client
        shards = Settings.from_env(self.system.env()).change_shards
        out: dict[str, Any] = {}
        for view in sorted({r.view for r in readers}):
            ours = [r for r in readers if r.view == view]
            codes: dict[str, int] = defaultdict(int)
            equal = 0
            for r in ours:
                for code in r.resets:
                    codes[code] += 1
                namespace = self._namespace(view)
                equal += r.rows == read_snapshot(client, view, r.key, shards, namespace).rows
            out[view] = {
                "subscribers": len(ours),
                "resets": dict(codes),
                "view_replaced_per_subscriber": sorted({r.resets.count("view_replaced")
                                                        for r in ours}),
                "rows_equal_serving_snapshot": equal,
            }  # fmt: skip
        return out

    def _namespace(self, view: str) -> str:
        pipeline = next(p for p, d in app.pipelines.items() if view in d.views)
        raw: Any = self.system.client.hget(ACTIVE_KEY, pipeline)
        return raw.decode() if raw else ""

    def window_figures(self) -> list[dict[str, Any]]:
        out = []
        for w in self.windows:
            samples = [ms for sent, ms in self.renames.timed if w.start <= sent < w.end]
            posted = sum(1 for _, _, sent in self.renames.sent.values() if w.start <= sent < w.end)
            out.append({
                "window": w.name,
                "seconds": round(w.end - w.start, 1),
                "renames_posted": posted,
                "push": {**latency_stats(samples),
                         "reflected_fraction": round(len(samples) / posted, 4) if posted else 0},
                "machine_busy_pct": w.busy_pct,
                "driver_jvm_cores": w.jvm_cores,
                "store_cores": w.store_cores,
                "benchmark_cores": w.ours_cores,
                "builder_cores": w.builder_cores,
                "store_long_calls": w.long_calls,
                "other_cores": round(max(0.0, w.busy_pct / 100 * CORES - w.ours_cores), 2),
                "batches": w.batches,
            })  # fmt: skip
        return out


def drain(system: System, env: dict[str, str], backlog: int) -> dict[str, Any]:
    """Start the pipeline process on the backlog; seconds until the views reflect all of it."""
    started, wall = time.monotonic(), time.time()
    system.start_pipeline(env)
    system.wait_until_caught_up(timeout=timeout_for(backlog))
    elapsed = time.monotonic() - started
    first = min((b.started for b in progress.batches(system.client, wall, time.time())
                 if b.events > 0), default=wall)  # fmt: skip
    from_first = time.time() - first
    return {
        "events": backlog,
        "seconds_from_process_start": round(elapsed, 1),
        "events_per_s_from_process_start": round(backlog / elapsed),
        "seconds_from_first_batch": round(from_first, 1),
        "events_per_s_from_first_batch": round(backlog / from_first),
    }


LOGS = {"redis": "rebuild", "kafka": "rebuild_kafka"}
"""Where the log can be, and the name of each one's result."""


@dataclass
class Plan:
    """What one run does."""

    backlog: int = 1_000_000
    rate: int = 100
    before_s: float = 30
    """The window before the rebuilds, and the one after them."""
    lead_in_s: float = LEAD_IN_S
    """The live writes before the window before the rebuilds: the serving versions' first
    minutes after the drain are no baseline (their JVM's compilers are still at work, and
    their batches take up to twice as long as two minutes later), and a live pipeline that
    readers depend on has been running for longer. Reported as a window of its own."""
    settle_s: float = SETTLE_S
    pipelines: list[str] = field(default_factory=lambda: list(PIPELINES))
    env: dict[str, str] = field(default_factory=lambda: {"LV_REBUILD_GRACE_SECONDS": "60"})
    """Settings of the pipeline process."""
    live_env: dict[str, str] = field(default_factory=dict)
    """If any: settings the pipeline process is restarted with once it has drained the
    backlog, so that a setting that would slow the drain (a small ``LV_MAX_EVENTS_PER_BATCH``
    holds Chirp's activity pipeline, which runs a micro-batch every 2 s) applies to the rebuild
    only."""
    log: str = "redis"
    """Where the log is: the store's streams (``redis``), or a Kafka node (``kafka``)."""

    @classmethod
    def quick(cls) -> Plan:
        """One pipeline's rebuild, the smallest (the others go the same way), by a builder at
        an ordinary niceness: in the idle class its JVM starts only in the moments the serving
        pipeline leaves both cores idle, which took most of a minute here."""
        return cls(backlog=5_000, before_s=3, lead_in_s=0, settle_s=1, pipelines=PIPELINES[:1],
                   env={"LV_REBUILD_GRACE_SECONDS": "1", "LV_REBUILD_NICENESS": "0"})  # fmt: skip


def measure(plan: Plan, name: str = "rebuild") -> tuple[dict[str, Any], Path]:
    with running_store(kafka=plan.log == "kafka") as system:
        writer = system.writer()
        figures: dict[str, Any] = {
            "log": plan.log,
            "append_events_per_s": round(append_backlog(writer, plan.backlog)),
        }
        writer.close()
        seed(system)
        figures["drain"] = drain(system, plan.env, plan.backlog)
        if plan.live_env:
            system.stop_pipeline()
            system.start_pipeline({**plan.env, **plan.live_env})
            system.wait_until_caught_up(timeout=timeout_for(plan.backlog))
        system.start_gateway()
        run = Run(system, plan.rate, plan.settle_s, timeout_for(plan.backlog))
        figures.update(asyncio.run(run.drive(plan)))
        figures["windows"] = run.window_figures()
        figures["publish_errors"] = run.renames.errors
        return figures, plot_timeline(run, name)


def run(quick: bool = False, plan: Plan | None = None, name: str = "rebuild") -> Report:
    if quick:
        plan = dataclasses.replace(Plan.quick(), log=plan.log if plan else "redis")
    plan = plan or Plan()
    moment = Moment()
    figures, plot = measure(plan, name)
    figures.update({"backlog": plan.backlog, "rate_events_per_s": plan.rate,
                    "pipeline_env": plan.env, "pipeline_env_after_the_drain": plan.live_env,
                    "pipelines_rebuilt": plan.pipelines})  # fmt: skip
    save(name, figures, moment)
    return Report(name, "A rebuild beside the live pipeline", "python -m bench.rebuild",
                  figures, rows(figures), [plot], moment=moment.finish())  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--backlog", type=int, default=1_000_000)
    parser.add_argument("--rate", type=int, default=100)
    parser.add_argument("--before", type=float, default=30, help="seconds before the rebuilds"
                        " (and after them)")  # fmt: skip
    parser.add_argument("--lead-in", type=float, default=LEAD_IN_S, metavar="SECONDS",
                        help="seconds of live writes after the drain, before the window before"
                        " the rebuilds")  # fmt: skip
    parser.add_argument("--pipelines", default=",".join(PIPELINES),
                        help="comma-separated, rebuilt in this order")  # fmt: skip
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a setting of the pipeline process (repeatable)",
    )
    parser.add_argument("--live-env", action="append", default=[], metavar="NAME=VALUE",
                        help="a setting of the pipeline process restarted after the drain,"
                        " for the rebuilds (repeatable)")  # fmt: skip
    parser.add_argument("--log", default="redis", metavar="LOGS",
                        help="redis (the store's streams), kafka (a Kafka node of the run's own),"
                        " or both, comma-separated, measured one after the other")  # fmt: skip
    parser.add_argument("--name", default="", help="the result file's name (default rebuild;"
                        " on Kafka with _kafka after it)")  # fmt: skip
    args = parser.parse_args()
    pipelines = [p for p in args.pipelines.split(",") if p]
    unknown = sorted(set(pipelines) - set(PIPELINES))
    if unknown:
        parser.error(f"unknown pipeline {', '.join(unknown)}; choose from {', '.join(PIPELINES)}")
    bad = [e for e in args.env + args.live_env if "=" not in e]
    if bad:
        parser.error(f"{bad[0]}: write NAME=VALUE")
    logs = [log for log in args.log.split(",") if log]
    if not logs or set(logs) - set(LOGS) or len(set(logs)) < len(logs):
        parser.error(f"--log {args.log}: give redis, kafka or both, comma-separated")
    if args.quick:  # never over the real figures, as the harness does
        os.environ.setdefault("LV_BENCH_RESULTS", str(RESULTS / "quick"))
    for log in logs:  # the same plan for each, in one run of the machine
        plan = Plan(args.backlog, args.rate, args.before, args.lead_in, pipelines=pipelines,
                    live_env=dict(e.split("=", 1) for e in args.live_env), log=log)  # fmt: skip
        plan.env.update(e.split("=", 1) for e in args.env)
        run(args.quick, plan, f"{args.name}{LOGS[log].removeprefix('rebuild')}" if args.name
            else LOGS[log])  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
