"""Publishing once: what an idempotency key costs a publish, against the same publish without.

    .venv/bin/python -m bench.publish [--quick] [--batches 20000] [--concurrency 32]

``client-js`` sends every batch with an idempotency key, so that a batch whose answer was lost
can be sent again and is appended once (docs/PROTOCOL.md, section 2). Without a key, a batch
on a single store server keeps no record: its one transaction is never retried. With one, the
gateway digests the events and the store keeps a record of the batch for
``LV_IDEMPOTENCY_SECONDS``. This measures that difference through the real gateway: single-event
batches posted to ``POST /v1/events`` by ``--concurrency`` clients at once, in alternating
rounds with a fresh key per batch and without (the same-run baseline). Per round:

- batches per second and each POST's latency (p50, p99);
- the gateway's CPU and the store's CPU (``INFO cpu``) per batch;
- the store's memory per batch (``used_memory`` after the round, against before it): the log
  entry alone without a key, the entry and the batch's record with one.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
import uuid
from typing import Any

import aiohttp
import psutil
import redis

from bench.common import RESULTS, Report, Row, percentile, save, store_cpu_s, token
from bench.moment import Moment
from bench.system import System, running_store

USER = "bench"
KINDS = ("keyless", "keyed")


def _memory(client: redis.Redis) -> int:
    info: Any = client.info("memory")
    return int(info["used_memory"])


async def _post_all(base: str, batches: int, concurrency: int, keyed: bool) -> list[float]:
    """POST ``batches`` single-event batches, ``concurrency`` at a time; their latencies, s."""
    headers = {"Authorization": f"Bearer {token(USER)}"}
    latencies: list[float] = []
    left = iter(range(batches))

    async def client(session: aiohttp.ClientSession) -> None:
        for i in left:
            body = [{"type": "profile_set", "payload": {"user": USER, "name": f"n{i}"}}]
            h = {**headers, "Idempotency-Key": uuid.uuid4().hex} if keyed else headers
            started = time.perf_counter()
            async with session.post(f"{base}/v1/events", json=body, headers=h) as r:
                await r.read()
                if r.status != 202:
                    raise RuntimeError(f"a publish was answered {r.status}: {await r.text()}")
            latencies.append(time.perf_counter() - started)

    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:
        await asyncio.gather(*(client(session) for _ in range(concurrency)))
    return latencies


def measure(system: System, batches: int, concurrency: int, keyed: bool) -> dict[str, Any]:
    assert system.gateway is not None
    gateway = psutil.Process(system.gateway.pid)
    memory, store_cpu = _memory(system.client), store_cpu_s(system.client)
    gateway_cpu = sum(gateway.cpu_times()[:2])
    started = time.perf_counter()
    latencies = asyncio.run(_post_all(system.base, batches, concurrency, keyed))
    wall = time.perf_counter() - started
    return {
        "batches_per_s": round(batches / wall),
        "p50_ms": round(percentile(latencies, 50) * 1000, 2),
        "p99_ms": round(percentile(latencies, 99) * 1000, 2),
        "gateway_cpu_us": round((sum(gateway.cpu_times()[:2]) - gateway_cpu) / batches * 1e6, 1),
        "store_cpu_us": round((store_cpu_s(system.client) - store_cpu) / batches * 1e6, 1),
        "store_bytes": round((_memory(system.client) - memory) / batches, 1),
    }


def run(quick: bool = False, batches: int = 20_000, concurrency: int = 32,
        name: str = "publish") -> Report:  # fmt: skip
    moment = Moment()
    batches = 300 if quick else batches
    rounds = 1 if quick else 3
    runs: dict[str, list[dict[str, Any]]] = {kind: [] for kind in KINDS}
    with running_store() as system:
        # One subject posts everything: no rate limit, as for a service that publishes.
        system.start_gateway({"LV_PUBLISH_RATE": "0"})
        measure(system, batches // 10 or 1, concurrency, keyed=True)  # warm-up, not kept
        for _ in range(rounds):
            for kind in KINDS:  # alternating: the machine's moment drifts
                runs[kind].append(measure(system, batches, concurrency, kind == "keyed"))
    median = {kind: {k: sorted(r[k] for r in rs)[len(rs) // 2] for k in rs[0]}
              for kind, rs in runs.items()}  # fmt: skip
    keyed, keyless = median["keyed"], median["keyless"]
    record = round(keyed["store_bytes"] - keyless["store_bytes"], 1)
    figures = {"batches": batches, "concurrency": concurrency, "rounds": rounds,
               "median": median, "record_bytes": record, "runs": runs}  # fmt: skip
    save(name, figures, moment)

    def row(figure: str, key: str, unit: str) -> Row:
        return Row(figure, f"{keyed[key]:,} {unit}".strip(), "",
                   f"without a key: {keyless[key]:,} {unit}".strip())  # fmt: skip

    rows = [
        row(f"single-event batches published per second, {concurrency} clients", "batches_per_s",
            ""),
        row("POST latency p50", "p50_ms", "ms"),
        row("POST latency p99", "p99_ms", "ms"),
        row("gateway CPU per batch", "gateway_cpu_us", "µs"),
        row("store CPU per batch", "store_cpu_us", "µs"),
        Row("store memory per batch's record, kept LV_IDEMPOTENCY_SECONDS", f"{record} bytes"),
    ]  # fmt: skip
    note = (
        f"Medians of {rounds} alternating rounds of {batches:,} batches each, every round in "
        f"`{name}.json`; each batch under a fresh key, as `client-js` sends them."
    )
    title = "Publishing once: the cost of an idempotency key"
    return Report(name, title, "python -m bench.publish", figures, rows, notes=[note],
                  moment=moment.finish())  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.publish", description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--batches", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, default=32)
    args = parser.parse_args()
    if args.quick:  # never over the real figures, as the harness does
        os.environ.setdefault("LV_BENCH_RESULTS", str(RESULTS / "quick"))
    report = run(args.quick, args.batches, args.concurrency)
    for r in report.rows:
        print(f"{r.figure}: {r.measured}" + (f" ({r.baseline})" if r.baseline else ""))


if __name__ == "__main__":
    main()
