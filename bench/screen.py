"""What the dead-letter screen costs per record, in one process, with Python's cyclic garbage
collector on and paused.

    .venv/bin/python -m bench.screen [--events 100000] [--rounds 5]

The same Chirp events (``bench.pipeline``'s backlog: 20,000 users), through the two forms of
the screen: the store source's (``Screen.passing`` over the entries of each partition, as
``liveviews.pipeline.source`` reads them) and the Kafka log's (``kafkascreen.screened`` over
one Arrow batch, as Spark's ``mapInArrow`` hands it over). Each in alternating rounds with the
collector on (the interpreter's default) and paused (``kafkascreen``'s ``_collector_paused``);
the medians, in µs per record. The store holds no dead letter and no quarantine: every record
passes, the common case. The Arrow transfer to and from Spark's worker is not in it.

Writes bench/results/screen.json.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa

from bench.common import free_port, save
from bench.moment import Moment
from demo.chirp import app
from demo.chirp.generate import Activity
from liveviews.log.events import partition_for
from liveviews.log.kafka.records import HEADER_TIME, HEADER_TYPE, record
from liveviews.log.screen import Screen
from liveviews.pipeline.kafkascreen import _collector_paused, screened
from liveviews.store.embedded import EmbeddedStore

PARTITIONS = 4
PIPELINE = "bench_screen"


def events(n: int) -> list[Any]:
    return app.validate_batch(Activity(users=20_000, seed=1).take(n))


def store_entries(evs: list[Any]) -> list[tuple[int, list[tuple[bytes, dict[bytes, bytes]]]]]:
    """The events as the store's source reads them: each partition's (entry id, fields)."""
    by_partition: dict[int, list[tuple[bytes, dict[bytes, bytes]]]] = {}
    for i, ev in enumerate(evs):
        p = partition_for(ev.key, PARTITIONS)
        by_partition.setdefault(p, []).append((f"1767225600000-{i}".encode(), ev.encode()))
    return list(by_partition.items())


def kafka_batch(evs: list[Any]) -> pa.RecordBatch:
    """The events as the Kafka screen gets them: one Arrow batch of ``RAW_COLUMNS``."""
    names = ("partition", "offset", "type", "key", "payload", "time")
    columns: dict[str, list[Any]] = {c: [] for c in names}
    for i, ev in enumerate(evs):
        key, value, headers = record(ev)
        found = dict(headers)
        columns["partition"].append(partition_for(ev.key, PARTITIONS))
        columns["offset"].append(str(i + 1))
        columns["type"].append(found[HEADER_TYPE])
        columns["key"].append(key)
        columns["payload"].append(value)
        columns["time"].append(found[HEADER_TIME])
    return pa.RecordBatch.from_arrays(
        [pa.array(columns["partition"], pa.int32()), pa.array(columns["offset"], pa.string()),
         *[pa.array(columns[c], pa.binary()) for c in ("type", "key", "payload", "time")],
         pa.array([0] * len(evs), pa.int64())],
        names=["partition", "offset", "type", "key", "payload", "time", "ingest_time_ms"],
    )  # fmt: skip


def timed(work: Callable[[], Any], paused: bool, n: int) -> float:
    """µs per record of one call of ``work``."""
    guard = _collector_paused() if paused else contextlib.nullcontext()
    t0 = time.perf_counter()
    with guard:
        work()
    return (time.perf_counter() - t0) / n * 1e6


def measure(url: str, n: int, rounds: int) -> dict[str, Any]:
    import redis

    client = redis.Redis.from_url(url)
    screen = Screen(client, app, PIPELINE, PARTITIONS)
    evs = events(n)
    entries, batch = store_entries(evs), kafka_batch(evs)
    kept = sum(len(e) for _, e in screen.passing(entries))
    assert kept == n and screened(screen, batch).num_rows == n, "the screen set records aside"
    forms: dict[str, Callable[[], Any]] = {
        "store": lambda: screen.passing(entries),
        "kafka": lambda: screened(screen, batch),
    }
    runs: dict[str, list[float]] = {}
    for _ in range(rounds):
        for form, work in forms.items():
            for paused in (False, True):
                name = f"{form}_{'collector_paused' if paused else 'collector_on'}_us"
                runs.setdefault(name, []).append(timed(work, paused, n))
    client.close()
    figures: dict[str, Any] = {"events": n, "rounds": rounds}
    figures |= {name: round(statistics.median(r), 2) for name, r in runs.items()}
    for form in forms:
        on, off = figures[f"{form}_collector_on_us"], figures[f"{form}_collector_paused_us"]
        figures[f"{form}_paused_over_on"] = round(off / on, 2)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.screen",
                                     description=__doc__.split("\n\n")[0])  # fmt: skip
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    moment = Moment()
    with (
        tempfile.TemporaryDirectory(prefix="lv-bench-screen-") as data,
        EmbeddedStore(Path(data), free_port()) as url,
    ):
        figures = measure(url, args.events, args.rounds)
    save("screen", figures, moment)


if __name__ == "__main__":
    main()
