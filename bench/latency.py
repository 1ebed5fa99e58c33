"""End-to-end latency: ``POST /v1/events`` until the delta reaches an SSE subscriber.

The whole system runs as ``make run`` runs it (store, Spark pipeline, gateway, each its own
process): configuration "realtime" as declared, with ``profiles`` in Spark's Real-Time Mode,
and "tuned" with every pipeline in micro-batches (``LV_REALTIME=off``), as before it was.
Chirp users change their display name through the gateway, at a fixed total rate; an observer
holds an SSE subscription to every user's ``profiles`` view. A change's latency is the time
from just before its POST to the arrival of the delta that carries it, on one clock.
Every change yields a delta (a timeline, by contrast, keeps only its newest 50 tweets).

In the same run, on the same system and load, a second client polls each user's profile
snapshot once a second, as a request/response application would (baseline "polling"). Then the
same rates run again against a pipeline with Spark's defaults instead of Liveviews' tuning
(baseline "untuned"). Last, the run's first two rates (10 and 100 events/s) run through two
pipelines that do less than Chirp's views, tuned as they are (``bench.ceilings``): the one
view the observer reads, as Spark's own aggregation and as a Python stateful operator. Chirp's
views do more in the same kind of operator as the second, so beyond the run's noise they are
no faster than it; the first shows what a view without Python processes would get.

The rates run one after the other on one pipeline, and 100 events/s runs twice: once a minute
after the pipeline's start, and again at the end, on a driver JVM whose JIT compiler has had
minutes to compile what each micro-batch runs. Each phase records when it started and how much
CPU the driver JVM used in it, its JIT compiler threads apart.

With ``--logs redis,kafka`` each configuration runs on the store's log and then on a Kafka
node (``liveviews.log.kafka.broker``, the log Spark reads with its own Kafka source), the two
one after the other so that the machine's moment is shared; the Kafka rows compare with the
store's same phase. Such a run writes ``latency_kafka.json``, and leaves the store's headline
figures in ``latency.json`` as they were.

    .venv/bin/python -m bench.latency [--quick] [--seconds 60] [--rates 10,100,1000,100]
        [--configurations tuned,realtime,untuned,spark_state,python_state]
        [--logs redis,kafka]
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson

from bench import ceilings, progress
from bench.common import Report, percentile, save, token
from bench.latencyreport import CONFIGURATIONS, LOGS, plot, result_key, summary_rows
from bench.moment import Moment
from bench.system import UNTUNED, System, jvm_cpu, running_store

USERS = 40
RATES = [10, 100, 1000, 100]
"""Events per second of each phase, in order; the second 100 is the same load on a warm JVM."""
BOUND_PHASES = 2
"""The bounds run the first phases of the run only: 10 events/s, then 100 a minute after the
pipeline's start, as Chirp's views do."""
"""Where the log lives: the store's streams (the default) or a Kafka node."""
POLL_INTERVAL_S = 1.0
TICK_S = 0.02
CATCH_UP_S = 600
"""How long a phase's backlog may take to drain before the next phase; longer fails the run."""


@dataclass
class Phase:
    """The samples of one rate on one pipeline configuration."""

    rate: int
    sent: dict[str, tuple[int, int, float]] = field(default_factory=dict)
    """name -> (user, sequence number, send time)"""
    pending: dict[int, deque[tuple[int, float]]] = field(default_factory=dict)
    """per user, the (sequence, send time) of renames the subscriber has not seen reflected"""
    poll_pending: dict[int, deque[tuple[int, float]]] = field(default_factory=dict)
    pushed: list[float] = field(default_factory=list)
    polled: list[float] = field(default_factory=list)
    errors: int = 0
    clock: Callable[[], float] = time.monotonic

    def posted(self, user: int, seq: int, name: str, now: float) -> None:
        self.sent[name] = (user, seq, now)
        self.pending.setdefault(user, deque()).append((seq, now))
        self.poll_pending.setdefault(user, deque()).append((seq, now))

    def reflected(self, name: str | None, now: float, *, polled: bool = False) -> None:
        """The view now shows ``name``: it reflects that rename and every earlier one of the
        same user (a micro-batch with several renames of a user yields one delta)."""
        sent = self.sent.get(name) if name else None
        if sent is None:
            return
        user, seq, _ = sent
        queue = (self.poll_pending if polled else self.pending)[user]
        samples = self.polled if polled else self.pushed
        while queue and queue[0][0] <= seq:
            samples.append((now - queue.popleft()[1]) * 1000)

    def replay(self, arrivals: list[tuple[str, float]]) -> list[float]:
        """Latencies of ``arrivals`` (name, arrival time on this phase's clock) measured
        elsewhere, such as in a browser, against this phase's posts."""
        other = Phase(self.rate, clock=self.clock)
        for name, (user, seq, sent) in sorted(self.sent.items(), key=lambda i: i[1][1]):
            other.posted(user, seq, name, sent)
        for name, at in arrivals:
            other.reflected(name, at)
        return other.pushed

    def summary(self) -> dict[str, Any]:
        def stats(values: list[float]) -> dict[str, float]:
            reflected = round(len(values) / len(self.sent), 4) if self.sent else 0.0
            return {**latency_stats(values), "reflected_fraction": reflected}

        return {
            "rate": self.rate,
            "changes_posted": len(self.sent),
            "push": stats(self.pushed),
            "polling": stats(self.polled),
            "publish_errors": self.errors,
        }


def latency_stats(values: list[float]) -> dict[str, float]:
    return {
        "n": len(values),
        "p50_ms": round(percentile(values, 50), 1),
        "p95_ms": round(percentile(values, 95), 1),
        "p99_ms": round(percentile(values, 99), 1),
        "max_ms": round(max(values), 1) if values else float("nan"),
    }


def seed(system: System) -> None:
    """The users, each with a few followers and tweets, so a rename also updates tweets."""
    events: list[dict[str, Any]] = []
    for u in range(USERS):
        events.append({"type": "profile_set", "payload": {"user": f"u{u}", "name": "start"}})
        for i in range(3):
            tweet = {"user": f"u{u}", "tweet": f"u{u}:seed{i}", "text": "hello"}
            events.append({"type": "tweet_posted", "payload": tweet})
            follow = {"user": f"u{(u + i + 1) % USERS}", "followee": f"u{u}"}
            events.append({"type": "follow", "payload": follow})
    writer = system.writer()
    try:
        writer.append_batch(events)
    finally:
        writer.close()  # on Kafka, a producer with its own threads


def _headers(user: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token(user)}"}


async def observe(session: aiohttp.ClientSession, base: str, user: str, phase: Phase,
                  ready: asyncio.Event) -> None:  # fmt: skip
    """An SSE subscription to ``profiles/<user>``: record the arrival of each posted name."""
    url = f"{base}/v1/views/profiles/{user}/live"
    timeout = aiohttp.ClientTimeout(total=None)
    async with session.get(url, headers=_headers("observer"), timeout=timeout) as r:
        r.raise_for_status()
        event = b""
        async for line in r.content:
            if line.startswith(b"event:"):
                event = line[6:].strip()
                if event == b"snapshot":
                    ready.set()
            elif line.startswith(b"data:") and event == b"delta":
                now = time.monotonic()
                for op in orjson.loads(line[5:])["ops"]:
                    if op["op"] == "upsert":
                        phase.reflected(op["value"]["name"], now)


async def poll(session: aiohttp.ClientSession, base: str, user: str, phase: Phase) -> None:
    """Baseline: read the profile's snapshot once a second and notice a new name."""
    url = f"{base}/v1/views/profiles/{user}"
    while True:
        started = time.monotonic()
        async with session.get(url, headers=_headers("observer")) as r:
            rows = (await r.json())["rows"] if r.status == 200 else {}
        now = time.monotonic()
        phase.reflected(rows.get("profile", {}).get("name"), now, polled=True)
        await asyncio.sleep(max(0.0, POLL_INTERVAL_S - (now - started)))


async def publish(session: aiohttp.ClientSession, base: str, phase: Phase, seconds: float,
                  label: str) -> None:  # fmt: skip
    """Renames at ``phase.rate`` per second: each tick, one POST by the next user whose turn
    it is, carrying the renames due (a user's renames in one batch all reach the view)."""
    tokens = [token(f"u{u}") for u in range(USERS)]
    n, user = 0, 0
    start = time.monotonic()
    posts: set[asyncio.Task[None]] = set()

    async def post(u: int, names: list[str]) -> None:
        body = [{"type": "profile_set", "payload": {"user": f"u{u}", "name": name}}
                for name in names]  # fmt: skip
        now = phase.clock()
        for name in names:
            phase.posted(u, int(name.rpartition("x")[2]), name, now)
        headers = {"Authorization": f"Bearer {tokens[u]}"}
        async with session.post(f"{base}/v1/events", json=body, headers=headers) as r:
            if r.status != 202:
                phase.errors += 1

    while (elapsed := time.monotonic() - start) < seconds:
        due = elapsed * phase.rate
        names: list[str] = []
        while n < due:
            names.append(f"{label}{n}")
            n += 1
        if names:
            task = asyncio.create_task(post(user, names))
            posts.add(task)
            task.add_done_callback(posts.discard)
            user = (user + 1) % USERS
        await asyncio.sleep(TICK_S)
    if posts:
        await asyncio.gather(*posts)


async def run_phase(base: str, rate: int, seconds: float, label: str) -> Phase:
    phase = Phase(rate)
    conn = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=conn) as session:
        readies = [asyncio.Event() for _ in range(USERS)]
        watchers = [asyncio.create_task(observe(session, base, f"u{u}", phase, readies[u]))
                    for u in range(USERS)]  # fmt: skip
        await asyncio.wait_for(asyncio.gather(*(r.wait() for r in readies)), 60)
        pollers = [asyncio.create_task(poll(session, base, f"u{u}", phase))
                   for u in range(USERS)]  # fmt: skip
        await publish(session, base, phase, seconds, label)
        await asyncio.sleep(5)  # the last tweets' deltas
        for task in watchers + pollers:
            task.cancel()
        await asyncio.gather(*watchers, *pollers, return_exceptions=True)
    return phase


def batch_figures(system: System, since: float) -> dict[str, Any]:
    """Per query: micro-batch durations and where their time went, from the pipeline's own
    ``StreamingQueryProgress`` records since ``since`` (seconds since the epoch)."""
    per_query: dict[str, list[dict[str, float]]] = {}
    for b in progress.batches(system.client, since):
        if b.events > 0:
            per_query.setdefault(b.query, []).append(b.duration_ms)
    out = {}
    for query, batches in per_query.items():
        phases = sorted({k for b in batches for k in b})
        out[query] = {
            "batches": len(batches),
            "p50_ms": {k: percentile([b.get(k, 0) for b in batches], 50) for k in phases},
            "p99_ms": {k: percentile([b.get(k, 0) for b in batches], 99) for k in phases},
        }
    return out


def run_configuration(name: str, env: dict[str, str], rates: list[int], seconds: float,
                      log: str = "redis") -> list[dict[str, Any]]:  # fmt: skip
    with running_store(kafka=log == "kafka") as system:
        seed(system)
        system.start_gateway({"LV_APP": env["LV_APP"]} if "LV_APP" in env else None)
        started = time.monotonic()
        system.start_pipeline(env)
        system.wait_until_caught_up(timeout=300)
        jvm = system.driver_jvm()
        out = []
        for i, rate in enumerate(rates):
            since = time.time()
            after_s = time.monotonic() - started
            before = jvm_cpu(jvm) if jvm else None
            label = f"{name[0]}{i}r{rate}x"  # unique per phase: a name reflects one rename
            phase = asyncio.run(run_phase(system.base, rate, seconds, label))
            summary = phase.summary()
            summary["after_pipeline_start_s"] = round(after_s, 1)
            if jvm and before:
                used = jvm_cpu(jvm)
                summary["driver_jvm_cpu_s"] = round(used["cpu_s"] - before["cpu_s"], 1)
                summary["driver_jit_cpu_s"] = round(used["jit_cpu_s"] - before["jit_cpu_s"], 2)
            summary["batches"] = batch_figures(system, since)
            summary["pushed_ms"] = phase.pushed
            summary["polled_ms"] = phase.polled
            # A rate the pipeline could not keep up with leaves a backlog, which would count
            # against the next phase: wait it out, and say how long it took.
            behind = time.monotonic()
            system.wait_until_caught_up(timeout=CATCH_UP_S)
            summary["caught_up_after_s"] = round(time.monotonic() - behind, 1)
            out.append(summary)
            print(f"{result_key(name, log)} {rate}/s from {after_s:.0f} s: push p50"
                  f" {summary['push']['p50_ms']} ms, p99 {summary['push']['p99_ms']} ms;"
                  f" polling p50 {summary['polling']['p50_ms']} ms; driver JVM"
                  f" {summary.get('driver_jvm_cpu_s')} CPU s, JIT"
                  f" {summary.get('driver_jit_cpu_s')}; caught up"
                  f" {summary['caught_up_after_s']} s after", flush=True)  # fmt: skip
        return out


def configuration_env(name: str) -> dict[str, str]:
    if name == "untuned":
        return UNTUNED
    if name in ceilings.LATENCY_KINDS:
        return {"LV_APP": f"bench.ceilings:{name.upper()}"}
    # Chirp as declared runs ``profiles`` in Real-Time Mode; "tuned" runs it in micro-batches,
    # as every checkout before that did, so that an A/B across them compares the same thing.
    if name == "realtime":
        return {"LV_REALTIME": "on"}
    return {"LV_REALTIME": "off"}


def run(quick: bool = False, seconds: float = 60, rates: list[int] | None = None,
        configurations: list[str] | None = None, logs: list[str] | None = None
        ) -> Report:  # fmt: skip
    if quick:
        seconds, rates, configurations = 4, [10], ["tuned"]
    moment = Moment()
    rates = rates or RATES
    results = {}
    for name in configurations or CONFIGURATIONS:
        phases = rates[:BOUND_PHASES] if name in ceilings.LATENCY_KINDS else rates
        for log in logs or LOGS[:1]:
            results[result_key(name, log)] = run_configuration(
                name, configuration_env(name), phases, seconds, log
            )
    report = "latency" if set(logs or LOGS[:1]) == {"redis"} else "latency_kafka"
    plots = plot(results, report)
    figures = {
        "seconds_per_rate": seconds,
        "users": USERS,
        "untuned_settings": UNTUNED,
        **{
            name: [{k: v for k, v in r.items() if not k.endswith("_ms")} for r in runs]
            for name, runs in results.items()
        },  # fmt: skip
    }
    save(report, figures, moment)
    return Report(report, "End-to-end latency", "python -m bench.latency", figures,
                  summary_rows(results, rates, seconds), plots,
                  moment=moment.finish())  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--rates", default=",".join(map(str, RATES)))
    parser.add_argument("--configurations", default=",".join(CONFIGURATIONS),
                        help="comma-separated, from: " + ",".join(CONFIGURATIONS))  # fmt: skip
    parser.add_argument("--logs", default=LOGS[0],
                        help="comma-separated, from: " + ",".join(LOGS))  # fmt: skip
    args = parser.parse_args()
    rates = [int(r) for r in args.rates.split(",")]
    configurations = [c for c in args.configurations.split(",") if c]
    unknown = sorted(set(configurations) - set(CONFIGURATIONS))
    if unknown:
        parser.error(f"unknown configuration {', '.join(unknown)}; choose from"
                     f" {', '.join(CONFIGURATIONS)}")  # fmt: skip
    logs = [g for g in args.logs.split(",") if g]
    unknown_logs = sorted(set(logs) - set(LOGS))
    if unknown_logs:
        parser.error(f"unknown log {', '.join(unknown_logs)}; choose from {', '.join(LOGS)}")
    run(args.quick, args.seconds, rates, configurations, logs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
