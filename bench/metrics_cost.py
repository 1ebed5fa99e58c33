"""What the gateway's figures cost: on the delivery path, per progress entry, and per scrape.

    .venv/bin/python -m bench.metrics_cost [--quick]

- **a counter bump**: ``Metrics.deltas_out += 1`` (a dataclass attribute) against
  prometheus_client's ``Counter.inc()`` (best of 5, ns per call): the decision to keep the
  counters of the delivery path hand-rolled rests on it;
- **bumps per delivery**: how many times the paths of ``bench.floor`` (a stream in its key's
  cohort, and a stream on its own) bump ``deltas_out``, ``frames_out`` and ``bytes_out`` per
  delivery, counted through a ``Metrics`` whose three attributes count their writes; beside
  it, the same-run µs per delivery of each path, to put the difference in proportion;
- **push latency**: ``Metrics.frontier_pushed`` per call (the change feed calls it once per
  progress entry it reads);
- **a scrape**: ``Metrics.scrape`` over an embedded store holding two pipelines, each with a
  version being built from the start of a log of 4 partitions (and ``activity``'s serving
  version too): ms per scrape in all and of this process's CPU, with the log shorter than the
  counting cap and with it far longer; beside it, the same counts read back as entries.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
import timeit
from pathlib import Path
from typing import Any

import orjson

from bench.common import Report, Row, save
from bench.floor import python_path_cost
from bench.moment import Moment, describe

REPEAT = 5
PARTITIONS = 4


def bump_cost(number: int) -> dict[str, float]:
    """ns per call of each way to count one delivery (best of ``REPEAT``)."""
    from prometheus_client import CollectorRegistry, Counter

    from liveviews.gateway.metrics import Metrics

    counter = Counter("lv_bench_total", "A counter of the benchmark.", registry=CollectorRegistry())
    statements: dict[str, tuple[str, dict[str, Any]]] = {
        "attribute_add_ns": ("m.deltas_out += 1", {"m": Metrics()}),
        "counter_inc_ns": ("c.inc()", {"c": counter}),
        "counter_inc_amount_ns": ("c.inc(147)", {"c": counter}),
        "empty_statement_ns": ("pass", {}),
    }
    return {
        name: round(min(timeit.repeat(stmt, globals=g, number=number, repeat=REPEAT))
                    / number * 1e9, 1)
        for name, (stmt, g) in statements.items()
    }  # fmt: skip


class _Counting:
    """The three delivery counters of ``Metrics`` as properties that count their writes."""

    writes = 0

    def __init__(self, name: str) -> None:
        self.slot = "_" + name

    def __get__(self, obj: Any, owner: Any) -> Any:
        return getattr(obj, self.slot)

    def __set__(self, obj: Any, value: Any) -> None:
        _Counting.writes += 1
        setattr(obj, self.slot, value)


def bumps_per_delivery(n: int, rounds: int, cohort: bool) -> float:
    """Writes of ``deltas_out``, ``frames_out`` and ``bytes_out`` per delivery on a path of
    ``bench.floor``."""
    import liveviews.gateway.metrics

    plain = liveviews.gateway.metrics.Metrics
    counting = type("CountingMetrics", (plain,), {
        name: _Counting(name) for name in ("deltas_out", "frames_out", "bytes_out")
    })  # fmt: skip
    liveviews.gateway.metrics.Metrics = counting  # type: ignore[misc,assignment]
    try:
        _Counting.writes = 0
        python_path_cost(n, rounds, cohort=cohort)
        # Three writes per Metrics made by its __init__; one Metrics per run.
        return round((_Counting.writes - 3) / (n * rounds * REPEAT), 3)
    finally:
        liveviews.gateway.metrics.Metrics = plain  # type: ignore[misc]


def push_latency_cost(number: int) -> float:
    """µs per ``Metrics.frontier_pushed`` of a 4-partition frontier (best of ``REPEAT``)."""
    from liveviews.gateway.metrics import Metrics

    m = Metrics()
    frontier = {str(p): f"{1_732_170_000_000 + p}-0" for p in range(PARTITIONS)}
    now = time.time()
    best = min(timeit.repeat(lambda: m.frontier_pushed(frontier, now), number=number,
                             repeat=REPEAT))  # fmt: skip
    return round(best / number * 1e6, 2)


async def _scrape_ms(url: str, entries: int) -> dict[str, float]:
    """ms per scrape (best of ``REPEAT``) with ``entries`` log entries per partition, of
    which two versions being built have read none: in all (``wall``), and of this process's
    CPU (``loop``: what the gateway's event loop spends, serving no one meanwhile)."""
    import redis
    import redis.asyncio as aioredis

    from liveviews.changes.lag import EVENT_CAP
    from liveviews.changes.topic import FRONTIER_KEY
    from liveviews.gateway.metrics import Metrics
    from liveviews.log.events import log_stream
    from liveviews.pipeline import versions

    sync = redis.Redis.from_url(url)
    sync.flushdb()
    for name in ("entities", "activity"):
        versions.register(sync, name, "v1")
        versions.begin(sync, name, "v2", "v2")
    with sync.pipeline(transaction=False) as pipe:
        for p in range(PARTITIONS):
            for i in range(entries):
                pipe.xadd(log_stream(p), {"type": "like", "key": "u", "payload": "{}"},
                          id=f"{1_000_000 + i}-0")  # fmt: skip
        # The serving version of entities is at the head; every other version has read nothing.
        head = {str(p): f"{1_000_000 + entries - 1}-0" for p in range(PARTITIONS)}
        pipe.hset(FRONTIER_KEY, "entities", orjson.dumps(head))
        pipe.execute()
    client = aioredis.Redis.from_url(url)
    metrics = Metrics()
    wall = loop = float("inf")
    for _ in range(REPEAT):
        t0, c0 = time.perf_counter(), time.process_time()
        await metrics.scrape(client, PARTITIONS, ["entities", "activity"], {"profiles": 1})
        wall = min(wall, time.perf_counter() - t0)
        loop = min(loop, time.process_time() - c0)
    # The alternative: the same counts read back as entries, as ``liveviews.changes.lag`` reads
    # them.
    read_wall = read_loop = float("inf")
    behind = 3 * PARTITIONS  # every partition of every version but the serving entities
    for _ in range(REPEAT):
        t0, c0 = time.perf_counter(), time.process_time()
        async with client.pipeline(transaction=False) as rpipe:
            for i in range(behind):
                rpipe.xrange(log_stream(i % PARTITIONS), "-", "+", count=EVENT_CAP + 1)
            await rpipe.execute()
        read_wall = min(read_wall, time.perf_counter() - t0)
        read_loop = min(read_loop, time.process_time() - c0)
    await client.aclose()
    sync.close()
    return {"wall": round(wall * 1000, 1), "loop": round(loop * 1000, 1),
            "read_back_wall": round(read_wall * 1000, 1),
            "read_back_loop": round(read_loop * 1000, 1)}  # fmt: skip


def scrape_cost(sizes: list[int]) -> dict[str, dict[str, float]]:
    from liveviews.store.embedded import EmbeddedStore, free_port

    with EmbeddedStore(Path(tempfile.mkdtemp(prefix="lv-bench-")), free_port()) as url:
        return {f"scrape_ms_{n}_per_partition": asyncio.run(_scrape_ms(url, n)) for n in sizes}


def run(quick: bool = False, name: str = "metrics_cost") -> Report:
    moment = Moment()
    number = 20_000 if quick else 2_000_000
    n, rounds = (50, 5) if quick else (2_000, 20)
    figures: dict[str, Any] = dict(bump_cost(number))
    figures["bumps_per_delivery"] = {
        "cohort": bumps_per_delivery(n, rounds, cohort=True),
        "own_stream": bumps_per_delivery(n, rounds, cohort=False),
    }
    figures["python_path_us"] = {
        "cohort": python_path_cost(n, rounds, cohort=True),
        "own_stream": python_path_cost(n, rounds, cohort=False),
    }
    figures["subscribers"] = n
    figures["frontier_pushed_us"] = push_latency_cost(number // 20)
    figures.update(scrape_cost([100] if quick else [1_000, 50_000]))
    extra = figures["counter_inc_ns"] - figures["attribute_add_ns"]
    rows = [
        Row("a counter bump", f"{figures['attribute_add_ns']} ns", "",
            f"Counter.inc() {figures['counter_inc_ns']} ns"),
    ]  # fmt: skip
    for path in ("cohort", "own_stream"):
        bumps = figures["bumps_per_delivery"][path]
        added = bumps * extra / 1000
        rows.append(Row(f"Counter.inc() would add per delivery ({path})",
                        f"{added:.3f} µs ({bumps} bumps)", "",
                        f"{figures['python_path_us'][path]} µs per delivery"))  # fmt: skip
    save(name, figures, moment)
    report = Report(name, "What the gateway's figures cost", "python -m bench.metrics_cost",
                    figures, rows, moment=moment.finish())  # fmt: skip
    for row in rows:
        print(f"{row.figure}: {row.measured} ({row.baseline})")
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes: shows it runs")
    args = parser.parse_args()
    print(describe(run(args.quick).moment))


if __name__ == "__main__":
    main()
