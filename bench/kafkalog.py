"""The log on Redis Streams beside Apache Kafka, in one run: appending a backlog, publishing
through the gateway, draining the backlog through a view declared as a query, and what the
backlog takes in each.

    .venv/bin/python -m bench.kafkalog [--quick] [--backlog 1000000] [--first redis|kafka]
                                       [--parts append,publish,drain] [--batches 10000]
                                       [--nodes 1|3]

One embedded store and one Kafka node (``liveviews.log.kafka.broker``, Apache Kafka's own jars;
``--nodes 3``: three, the topic replicated on each and an append acknowledged by two, as
``make run-cluster`` runs them) on this machine, one SparkSession. The same Chirp events
(``bench.pipeline``'s backlog: 20,000 users) go to each log in batches of 5,000 through its
writer, ``EventLog`` (one MULTI per batch) and ``KafkaEventLog`` (one Kafka transaction per
batch, ``acks=all``). Then ``bench.declared``'s view (each user's count of events and newest
type; on Kafka, behind the pipeline's dead-letter screen, ``liveviews.pipeline.kafkascreen``),
grouped by the log's key and by a payload field, drains each log from an empty change topic:
for each grouping, Redis Streams first, then Kafka (Spark's own Kafka source), or Kafka first
with ``--first kafka``: the JVM's first drain also warms it.

Publishing through the gateway: two gateway processes over the same store, one with
``LV_KAFKA``, each posted ``--batches`` single-event batches by 32 clients at once
(``bench.publish.measure``), without and with an idempotency key, in alternating rounds (3;
the medians are kept).

What the backlog takes: in the store, the log's streams (``MEMORY USAGE``, RAM); in Kafka, the
topic's segment files on disk, on every node (one replica each).

Writes bench/results/kafkalog.json (``kafkalog_<parts>[_3nodes].json`` for some parts).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import redis

from bench import ceilings, declared, publish
from bench.common import RESULTS, Report, Row, free_port, save
from bench.moment import Moment
from bench.pipeline import BACKLOG_BATCH, append_backlog, drain, settings_for
from bench.system import System
from demo.chirp import app
from liveviews.changes.topic import VIEWS_FRONTIER, read_frontier
from liveviews.log.eventlog import EventLog
from liveviews.log.events import log_stream
from liveviews.log.kafka.append import KafkaEventLog
from liveviews.log.kafka.broker import KafkaCluster
from liveviews.log.kafka.lag import at_ends, log_ends
from liveviews.log.kafka.topic import LOG_TOPIC
from liveviews.store.embedded import EmbeddedStore

BATCH = BACKLOG_BATCH
PARTITIONS = 4
CONCURRENCY = 32
PARTS = ("append", "publish", "drain")


def store_bytes(client: redis.Redis, partitions: int) -> int:
    return sum(int(client.memory_usage(log_stream(p), samples=0) or 0) for p in range(partitions))


def kafka_bytes(cluster: KafkaCluster) -> int:
    """The log topic's segment files, on every node."""
    total = 0
    for node in cluster.nodes:
        for folder in (node.folder / "data").glob(f"{LOG_TOPIC}-*"):
            total += sum(f.stat().st_size for f in folder.iterdir() if f.suffix == ".log")
    return total


def publish_through_gateways(url: str, client: redis.Redis, bootstrap: str, data: Path,
                             batches: int, rounds: int) -> dict[str, Any]:  # fmt: skip
    """Medians of alternating rounds through a gateway on each log: ``<log>_<keyless|keyed>``."""
    systems = {log: System(url, client, data / f"gateway-{log}") for log in ("redis", "kafka")}
    try:
        for log, system in systems.items():
            system.data.mkdir(parents=True, exist_ok=True)
            extra = {"LV_PUBLISH_RATE": "0", "LV_LOG_PARTITIONS": str(PARTITIONS)}
            system.start_gateway({**extra, "LV_KAFKA": bootstrap} if log == "kafka" else extra)
            publish.measure(system, max(1, batches // 10), CONCURRENCY, keyed=False)  # warm-up
        runs: dict[str, list[dict[str, Any]]] = {}
        for _ in range(rounds):
            for log, system in systems.items():
                for kind in publish.KINDS:
                    runs.setdefault(f"{log}_{kind}", []).append(
                        publish.measure(system, batches, CONCURRENCY, kind == "keyed"))  # fmt: skip
    finally:
        for system in systems.values():
            if system.gateway is not None:
                system.gateway.terminate()
                system.gateway.wait(20)
    return {name: {k: sorted(r[k] for r in rs)[len(rs) // 2] for k in rs[0]}
            for name, rs in runs.items()}  # fmt: skip


def run(quick: bool = False, backlog: int = 1_000_000, first: str = "redis",
        name: str = "kafkalog", parts: tuple[str, ...] = PARTS,
        batches: int = 10_000, nodes: int = 1) -> Report:  # fmt: skip
    if quick:
        backlog, batches = 5_000, 300
    moment = Moment()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    figures: dict[str, Any] = {"backlog": backlog, "batch": BATCH, "partitions": PARTITIONS,
                               "first": first, "kafka_nodes": nodes}  # fmt: skip
    logs = ("redis", "kafka") if first == "redis" else ("kafka", "redis")
    with tempfile.TemporaryDirectory(prefix="lv-bench-") as tmp:
        data = Path(tmp)
        cluster = KafkaCluster(data / "kafka", nodes=nodes)
        with EmbeddedStore(data / "store", free_port()) as url, cluster as bootstrap:
            client = redis.Redis.from_url(url, socket_timeout=60)
            kafka = KafkaEventLog(bootstrap, app, PARTITIONS, client)
            if "append" in parts or "drain" in parts:
                figures["append_events_per_s"] = {
                    "redis": round(append_backlog(EventLog(client, app, PARTITIONS), backlog)),
                    "kafka": round(append_backlog(kafka, backlog)),
                }
                figures["log_bytes"] = {"redis": store_bytes(client, PARTITIONS),
                                        "kafka": kafka_bytes(cluster)}  # fmt: skip
            kafka.close()
            if "publish" in parts:
                rounds = 1 if quick else 3
                figures["publish"] = publish_through_gateways(url, client, bootstrap, data,
                                                              batches, rounds)  # fmt: skip
            if "drain" not in parts:
                return _report(name, figures, moment, backlog)
            from liveviews.pipeline.session import build_session

            spark = build_session(settings_for(url, data))
            spark.sparkContext.setLogLevel("ERROR")
            ends = log_ends(bootstrap, LOG_TOPIC, PARTITIONS)

            def kafka_caught_up() -> bool:
                return at_ends(read_frontier(client, VIEWS_FRONTIER), ends)

            drains: dict[str, dict[str, Any]] = {}
            for by in declared.GROUPINGS:
                for log in logs:
                    ceilings.forget_views(client)
                    settings = settings_for(url, data / f"{log}-{by}")
                    caught_up = None
                    if log == "kafka":
                        settings = dataclasses.replace(settings, kafka=bootstrap)
                        caught_up = kafka_caught_up
                    drains[f"{log}_by_{by}"] = drain(spark, settings, client, backlog,
                                                     declared.app(by), caught_up)  # fmt: skip
            figures["drain"] = drains
            spark.stop()
    return _report(name, figures, moment, backlog)


def _report(name: str, figures: dict[str, Any], moment: Moment, backlog: int) -> Report:
    save(name, figures, moment)
    rows: list[Row] = []
    if "append_events_per_s" in figures:
        per_s, size = figures["append_events_per_s"], figures["log_bytes"]
        rows += [
            Row(f"append {backlog:,} events in batches of {BATCH:,} (one process, synchronous)",
                f"Kafka: {per_s['kafka']:,} events/s",
                baseline=f"Redis Streams: {per_s['redis']:,}"),
            Row(f"what the backlog of {backlog:,} events takes",
                f"Kafka: {size['kafka'] / 2**20:,.1f} MiB on disk "
                f"({figures['kafka_nodes']} replica(s))",
                baseline=f"Redis Streams: {size['redis'] / 2**20:,.1f} MiB of RAM"),
        ]  # fmt: skip
    for kind in publish.KINDS if "publish" in figures else ():
        k, r = figures["publish"][f"kafka_{kind}"], figures["publish"][f"redis_{kind}"]
        rows.append(Row(
            f"publish through the gateway, single events {kind}, {CONCURRENCY} clients: "
            "events/s, POST p50 / p99",
            f"Kafka: {k['batches_per_s']:,}/s, {k['p50_ms']} / {k['p99_ms']} ms",
            baseline=f"Redis Streams: {r['batches_per_s']:,}/s, {r['p50_ms']} / {r['p99_ms']} ms",
        ))  # fmt: skip
    d = figures.get("drain", {})
    rows += [Row(f"drain through a declared view grouped by {declared.GROUPINGS[by]}",
                 f"Kafka: {d[f'kafka_by_{by}']['events_per_s_wall']:,} events/s",
                 baseline=f"Redis Streams: {d[f'redis_by_{by}']['events_per_s_wall']:,}")
             for by in declared.GROUPINGS if f"kafka_by_{by}" in d]  # fmt: skip
    return Report(name, "The log on Redis Streams beside Apache Kafka",
                  "python -m bench.kafkalog", figures, rows, moment=moment.finish())  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.kafkalog",
                                     description=__doc__.split("\n\n")[0])  # fmt: skip
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--backlog", type=int, default=1_000_000)
    parser.add_argument(
        "--first",
        choices=("redis", "kafka"),
        default="redis",
        help="which log each grouping drains first (default redis)",
    )
    parser.add_argument("--parts", default=",".join(PARTS),
                        help="what to measure, of append,publish,drain (default all); a run of "
                        "some writes kafkalog_<parts>.json")  # fmt: skip
    parser.add_argument("--batches", type=int, default=10_000,
                        help="single-event batches each publishing round posts")  # fmt: skip
    parser.add_argument("--nodes", type=int, choices=(1, 3), default=1,
                        help="Kafka nodes: 3 replicate the topic three times, an append "
                        "acknowledged by two (default 1)")  # fmt: skip
    args = parser.parse_args()
    parts = tuple(p for p in PARTS if p in args.parts.split(","))
    if not parts:
        parser.error(f"--parts takes some of {','.join(PARTS)}")
    name = "kafkalog" if parts == PARTS else "kafkalog_" + "_".join(parts)
    name += "_3nodes" if args.nodes == 3 else ""
    if args.quick:  # never over the real figures
        os.environ.setdefault("LV_BENCH_RESULTS", str(RESULTS / "quick"))
    report = run(args.quick, args.backlog, args.first, name, parts, args.batches, args.nodes)
    for row in report.rows:
        print(f"{row.figure}: {row.measured} ({row.baseline})")


if __name__ == "__main__":
    main()
