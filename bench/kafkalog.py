"""The log on Redis Streams beside Apache Kafka, in one run: appending a backlog, draining it
through a view declared as a query, and what the backlog takes in each.

    .venv/bin/python -m bench.kafkalog [--quick] [--backlog 1000000] [--first redis|kafka]

One embedded store and one Kafka node (``liveviews.log.kafka.broker``, Apache Kafka's own jars)
on this machine, one SparkSession. The same Chirp events (``bench.pipeline``'s backlog: 20,000
users) go to each log in batches of 5,000 through its writer, ``EventLog`` (one MULTI per
batch) and ``KafkaEventLog`` (one Kafka transaction per batch, ``acks=all``). Then
``bench.declared``'s view (each user's count of events and newest type, no Python per event),
grouped by the log's key and by a payload field, drains each log from an empty change topic:
for each grouping, Redis Streams first, then Kafka (Spark's own Kafka source), or Kafka first
with ``--first kafka``: the JVM's first drain also warms it.

What the backlog takes: in the store, the log's streams (``MEMORY USAGE``, RAM); in Kafka, the
topic's segment files on disk (one replica; a cluster keeps three).

Writes bench/results/kafkalog.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import redis

from bench import ceilings, declared
from bench.common import Report, Row, free_port, save
from bench.moment import Moment
from bench.pipeline import drain, settings_for
from demo.chirp import app
from demo.chirp.generate import Activity
from liveviews.changes.topic import VIEWS_FRONTIER, read_frontier
from liveviews.log.eventlog import EventLog
from liveviews.log.events import log_stream
from liveviews.log.kafka.append import KafkaEventLog
from liveviews.log.kafka.broker import KafkaCluster
from liveviews.log.kafka.topic import LOG_TOPIC
from liveviews.log.writer import LogWriter
from liveviews.store.embedded import EmbeddedStore

BATCH = 5000
PARTITIONS = 4


def append_backlog(log: LogWriter, n: int) -> float:
    """Append ``n`` events in batches of ``BATCH``: events/s."""
    activity = Activity(users=20_000, seed=1)
    t0 = time.monotonic()
    for _ in range(max(1, n // BATCH)):
        log.append_batch(activity.take(min(BATCH, n)))
    return n / (time.monotonic() - t0)


def kafka_ends(bootstrap: str, partitions: int) -> dict[int, int]:
    """Each partition's next offset: where a reader of all of it is."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-ends"})
    try:
        return {p: consumer.get_watermark_offsets(TopicPartition(LOG_TOPIC, p), 30)[1]
                for p in range(partitions)}  # fmt: skip
    finally:
        consumer.close()


def store_bytes(client: redis.Redis, partitions: int) -> int:
    return sum(int(client.memory_usage(log_stream(p), samples=0) or 0) for p in range(partitions))


def kafka_bytes(cluster: KafkaCluster) -> int:
    """The log topic's segment files, on every node."""
    total = 0
    for node in cluster.nodes:
        for folder in (node.folder / "data").glob(f"{LOG_TOPIC}-*"):
            total += sum(f.stat().st_size for f in folder.iterdir() if f.suffix == ".log")
    return total


def run(quick: bool = False, backlog: int = 1_000_000, first: str = "redis",
        name: str = "kafkalog") -> Report:  # fmt: skip
    if quick:
        backlog = 5_000
    moment = Moment()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    figures: dict[str, Any] = {"backlog": backlog, "batch": BATCH, "partitions": PARTITIONS,
                               "first": first}  # fmt: skip
    logs = ("redis", "kafka") if first == "redis" else ("kafka", "redis")
    with tempfile.TemporaryDirectory(prefix="lv-bench-") as tmp:
        data = Path(tmp)
        cluster = KafkaCluster(data / "kafka")
        with EmbeddedStore(data / "store", free_port()) as url, cluster as bootstrap:
            client = redis.Redis.from_url(url, socket_timeout=60)
            kafka = KafkaEventLog(bootstrap, app, PARTITIONS, client)
            figures["append_events_per_s"] = {
                "redis": round(append_backlog(EventLog(client, app, PARTITIONS), backlog)),
                "kafka": round(append_backlog(kafka, backlog)),
            }
            kafka.close()
            figures["log_bytes"] = {"redis": store_bytes(client, PARTITIONS),
                                    "kafka": kafka_bytes(cluster)}  # fmt: skip
            from liveviews.pipeline.session import build_session

            spark = build_session(settings_for(url, data))
            spark.sparkContext.setLogLevel("ERROR")
            ends = kafka_ends(bootstrap, PARTITIONS)

            def kafka_caught_up() -> bool:
                frontier = read_frontier(client, VIEWS_FRONTIER)
                return all(int(frontier.get(p, "0")) >= end for p, end in ends.items())

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
    save(name, figures, moment)
    per_s, size, d = figures["append_events_per_s"], figures["log_bytes"], figures["drain"]
    rows = [
        Row(f"append {backlog:,} events in batches of {BATCH:,} (one process, synchronous)",
            f"Kafka: {per_s['kafka']:,} events/s", baseline=f"Redis Streams: {per_s['redis']:,}"),
        Row(f"what the backlog of {backlog:,} events takes",
            f"Kafka: {size['kafka'] / 2**20:,.1f} MiB on disk",
            baseline=f"Redis Streams: {size['redis'] / 2**20:,.1f} MiB of RAM"),
        *[Row(f"drain through a declared view grouped by {declared.GROUPINGS[by]}",
              f"Kafka: {d[f'kafka_by_{by}']['events_per_s_wall']:,} events/s",
              baseline=f"Redis Streams: {d[f'redis_by_{by}']['events_per_s_wall']:,}")
          for by in declared.GROUPINGS],
    ]  # fmt: skip
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
    args = parser.parse_args()
    report = run(args.quick, args.backlog, args.first)
    for row in report.rows:
        print(f"{row.figure}: {row.measured} ({row.baseline})")


if __name__ == "__main__":
    main()
