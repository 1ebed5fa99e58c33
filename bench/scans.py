"""What a second scan of the log costs a micro-batch: one view, written with one scan of the
events and with two.

    .venv/bin/python -m bench.scans [--quick] [--backlog 200000] [--rate 100] [--seconds 30]
        [--rounds 2]

Each tweet's like count over Chirp's events (a like adds one, an unlike takes one back), as a
declared view in two forms with the same results:

- ``one_scan``: ``payloads(events, app, "like", "unlike")``, then the count;
- ``two_scans``: a union of a ``like`` branch and an ``unlike`` branch of the events, as
  people write it in SQL (``... FROM like UNION ALL ... FROM unlike``): Spark scans the events
  once per branch, both to the one offset of the batch.

For each, in alternating rounds: a backlog drained from a fresh checkpoint (events/s), then the
micro-batches of a steady stream of Chirp events at ``--rate`` (their duration and the sink's
part of it, p50 and p99). The log's source reads each batch once on the driver whatever the
number of scans (``LV_READ_TASKS=0``); a second scan reads the batch's cached rows again.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import redis
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from bench.common import Report, Row, free_port, percentile, save
from bench.moment import Moment
from bench.pipeline import drain, settings_for, write_backlog
from demo.chirp import app as chirp
from demo.chirp.generate import Activity
from liveviews.app import App
from liveviews.log.eventlog import EventLog, views_caught_up
from liveviews.pipeline.declared import payloads, view_changes
from liveviews.pipeline.settings import Settings
from liveviews.store.embedded import EmbeddedStore

VIEW = "like_counts"
FORMS = {"one_scan": "one scan of the events", "two_scans": "a union of two scans"}


def app(form: str) -> App:
    """Chirp's event types and the one view, computed in ``form``."""
    counted = App(f"scans_{form}", event_types=dict(chirp.event_types))
    counted.view(VIEW, description="each tweet's likes less its unlikes")

    def like_counts(events: DataFrame) -> DataFrame:
        if form == "one_scan":
            votes = payloads(events, counted, "like", "unlike").select(
                "tweet", F.when(F.col("type") == "like", 1).otherwise(-1).alias("vote")
            )
        else:
            likes = payloads(events, counted, "like").select("tweet", F.lit(1).alias("vote"))
            unlikes = payloads(events, counted, "unlike").select("tweet", F.lit(-1).alias("vote"))
            votes = likes.unionByName(unlikes)
        rows = votes.groupBy("tweet").agg(F.sum("vote").alias("likes"))
        return view_changes(rows, VIEW, key="tweet")

    counted.pipeline(form, views=[VIEW])(like_counts)
    return counted


def steady(
    spark: Any, settings: Settings, client: redis.Redis, application: App, rate: int, seconds: int
) -> dict[str, Any]:
    """The micro-batches of ``application``'s one query while Chirp events arrive at ``rate``."""
    from liveviews.pipeline.versioning import start

    (query,) = start(spark, application, settings)
    log = EventLog(client, application, 4)
    activity = Activity(users=2000, seed=9)
    while not views_caught_up(client, settings.log_partitions):
        time.sleep(0.1)
    began, sent = time.monotonic(), 0
    while time.monotonic() - began < seconds:
        due = int((time.monotonic() - began) * rate)
        if due > sent:
            log.append_batch(activity.take(due - sent))
            sent = due
        time.sleep(0.005)
    time.sleep(2)
    batches = [p for p in query.recentProgress if p["numInputRows"]]
    query.stop()
    total = [p["durationMs"]["triggerExecution"] for p in batches]
    sink = [p["durationMs"].get("addBatch", 0) for p in batches]
    return {
        "batches": len(batches),
        "batch_ms_p50": percentile(total, 50),
        "batch_ms_p99": percentile(total, 99),
        "add_batch_ms_p50": percentile(sink, 50),
    }


def run(quick: bool = False, backlog: int = 200_000, rate: int = 100, seconds: int = 30,
        rounds: int = 2, name: str = "scans") -> Report:  # fmt: skip
    if quick:
        backlog, seconds, rounds = 5_000, 5, 1
    moment = Moment()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    runs: dict[str, list[dict[str, Any]]] = {form: [] for form in FORMS}
    with tempfile.TemporaryDirectory(prefix="lv-bench-") as tmp:
        data = Path(tmp)
        with EmbeddedStore(data / "store", free_port()) as url:
            client = redis.Redis.from_url(url, socket_timeout=60)
            from liveviews.pipeline.session import build_session

            spark = build_session(settings_for(url, data))
            spark.sparkContext.setLogLevel("ERROR")
            for r in range(rounds):
                for form in FORMS if r % 2 == 0 else reversed(FORMS):
                    client.flushdb()
                    write_backlog(client, backlog)
                    where = data / f"{form}-{r}"
                    drained = drain(spark, settings_for(url, where / "drain"), client, backlog,
                                    app(form))  # fmt: skip
                    client.flushdb()
                    live = steady(spark, settings_for(url, where / "steady"), client, app(form),
                                  rate, seconds)  # fmt: skip
                    runs[form].append({"drain_events_per_s": drained["events_per_s_wall"],
                                       **live})  # fmt: skip
            spark.stop()
    figures: dict[str, Any] = {
        "backlog": backlog, "rate_events_per_s": rate, "seconds": seconds, "rounds": runs,
    }  # fmt: skip
    save(name, figures, moment)

    def each(form: str, field: str) -> str:
        return " / ".join(f"{r[field]:,}" for r in runs[form])

    rows = [
        *[Row(f"backlog drain of {backlog:,} Chirp events, a like count: {FORMS[form]} "
              "(each round)", f"{each(form, 'drain_events_per_s')} events/s")
          for form in FORMS],
        *[Row(f"micro-batch at {rate} events/s, p50 (its sink's part): {FORMS[form]} "
              "(each round)", f"{each(form, 'batch_ms_p50')} ms "
              f"({each(form, 'add_batch_ms_p50')} ms)")
          for form in FORMS],
    ]  # fmt: skip
    return Report("scans", "What a second scan of the log costs a micro-batch",
                  "python -m bench.scans", figures, rows, moment=moment.finish())  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.scans",
                                     description=__doc__.split("\n\n")[0])  # fmt: skip
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--backlog", type=int, default=200_000)
    parser.add_argument("--rate", type=int, default=100)
    parser.add_argument("--seconds", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    report = run(args.quick, args.backlog, args.rate, args.seconds, args.rounds)
    for row in report.rows:
        print(f"{row.figure}: {row.measured}")


if __name__ == "__main__":
    main()
