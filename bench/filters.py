"""What filters cost the gateway: deliveries per server CPU second to filtered subscribers.

10,000 SSE subscribers follow the board's ``tasks`` view by prefix, 200 on each of 50 boards,
while a publisher changes one task of a board 20 times a second through the real sink. The
same load runs four times, each on a fresh gateway: with no filter, with one filter that every
subscriber shares, with 100 distinct filters, and with 100 distinct filters that let only a
tenth of the rows through. The first three filters match every row, so every setting makes
the same deliveries and their CPU per delivery compares directly: the difference is what
evaluating filters costs. The last one shows what a selective filter saves.

    .venv/bin/python -m bench.filters [--quick]

Writes bench/results/filters.json.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import orjson
import redis

from bench import contenders as c
from bench.common import Report, Row, raise_open_files, save
from bench.fanout import measure
from bench.loadclient import marker
from bench.moment import Moment
from demo.board.app import app as board
from liveviews.pipeline.sink import ChangeTopicSink
from liveviews.store.embedded import EmbeddedStore

SUBSCRIBERS = 10_000
BOARDS = 50
RATE = 20
TASKS_PER_BOARD = 4
SELECTIVE = 10
"""In the selective setting, a row matches one subscriber's filter in this many."""

Filter = dict[str, Any] | None


def every_row(i: int) -> Filter:
    """One of 100 distinct filters that each match every row the publisher writes."""
    return {"or": [{"field": "m", "null": False}, {"field": "x", "eq": i % 100}]}


Where = Callable[[int], Filter]
"""The filter of subscriber ``i``, or none."""

SETTINGS: list[tuple[str, Where]] = [
    ("no filter", lambda i: None),
    ("1 filter", lambda i: {"field": "m", "null": False}),
    ("100 filters", every_row),
    ("100 filters, 1 row in 10", lambda i: {"and": [
        {"field": "n", "eq": i // BOARDS % SELECTIVE}, {"field": "x", "ne": i % 100}]}),
]  # fmt: skip
"""A name, and the filter of subscriber ``i`` (who follows board ``i % BOARDS``). A selective
filter matches the rows whose ``n`` is its own, so each message reaches one in ``SELECTIVE`` of
its board's subscribers; the field ``x``, -1 in every row, makes 100 of them distinct without
changing what they match."""


class TaskPublisher:
    """Changes one task of each board it is given, as one micro-batch through the real sink."""

    def __init__(self, store_url: str) -> None:
        self.client = redis.Redis.from_url(store_url)
        self.sink = ChangeTopicSink(self.client, board, "tasks", c.SHARDS, 10_000)
        self.batch = int(time.time() * 1000)

    def publish(self, keys: list[str]) -> None:
        self.batch += 1
        rows: list[dict[str, Any]] = [
            {"view": "tasks", "key": f"{prefix}t{self.batch % TASKS_PER_BOARD}", "row": "task",
             "score": 0.0,
             "value": orjson.dumps({"m": marker(time.time()), "n": self.batch % SELECTIVE,
                                    "x": -1, "title": "a task"}).decode()}
            for prefix in keys
        ]  # fmt: skip
        self.sink.write(rows, self.batch, {0: f"{self.batch}-0"})

    def close(self) -> None:
        self.client.close()


def request_for(server: c.Server, where: Where) -> Callable[[int, str], bytes]:
    """Subscriber ``i`` of a board's prefix, with its filter if it has one."""

    def request(i: int, prefix: str) -> bytes:
        query: dict[str, str] = {"view": "tasks", "prefix": prefix}
        f = where(i)
        if f is not None:
            query["filter"] = orjson.dumps(f).decode()
        return replace(server, path="/v1/live?" + urlencode(query)).request("")

    return request


def run(quick: bool = False) -> Report:
    raise_open_files()
    moment = Moment()
    subscribers = 200 if quick else SUBSCRIBERS
    seconds = 2.0 if quick else 6.0
    prefixes = [f"b{i}/" for i in range(BOARDS)]
    started = time.monotonic()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        store = EmbeddedStore(Path(tmp), c.free_port())
        url = store.start()
        try:
            store_pids = [store.process.pid] if store.process else []
            for name, where in SETTINGS:
                gateway = c.liveviews(url, name=name, extra={"LV_APP": "demo.board.app:app"})
                with gateway as server:
                    publisher = TaskPublisher(url)
                    try:
                        row, _ = measure(server, store_pids, publisher, subscribers, prefixes, 1,
                                         seconds, drain=1.0, rate=RATE,
                                         request=request_for(server, where))  # fmt: skip
                    finally:
                        publisher.close()
                rows.append(row)
        finally:
            store.stop()
    figures = {
        "subscribers": subscribers,
        "boards": BOARDS,
        "messages_per_second": RATE,
        "publish_seconds": seconds,
        "settings": rows,
        "wall_seconds": round(time.monotonic() - started, 1),
    }
    save("filters", figures, moment)
    return Report(
        name="filters",
        title="Filtered subscriptions: server CPU per delivery",
        command="python -m bench.filters" + (" --quick" if quick else ""),
        figures=figures,
        rows=_summary(rows, subscribers),
        plots=[],
        notes=[
            "The first three settings deliver every row to every subscriber of its board; the "
            "last delivers a tenth of them, so its deliveries are fewer.",
            "Client and server share the same 2 cores; server CPU is utime+stime of the "
            "gateway's process.",
        ],
        moment=moment.finish(),
    )


def _summary(rows: list[dict[str, Any]], n: int) -> list[Row]:
    base = next((r for r in rows if r["contender"] == "no filter"), None)
    out = []
    for r in rows:
        ratio = ""
        if base and base["deliveries_per_server_cpu_second"] and r is not base:
            share = r["deliveries_per_server_cpu_second"] / base["deliveries_per_server_cpu_second"]
            ratio = f"{share:.2f}x of no filter"
        out.append(Row(
            f"deliveries per server CPU second, {n} prefix subscribers, {r['contender']}",
            f"{r['deliveries_per_server_cpu_second']} ({r['server_cpu_us_per_delivery']} µs; "
            f"{r['deliveries']} deliveries, p99 {r['latency_ms']['p99']} ms)",
            "filters do not tax subscribers that use none", ratio,
        ))  # fmt: skip
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="200 subscribers, a few seconds")
    args = parser.parse_args()
    run(args.quick)
    return 0


if __name__ == "__main__":
    sys.exit(main())
