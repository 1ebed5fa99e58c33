"""Fan-out: deliveries/s, server CPU per delivery and delivery latency against baselines.

At 1k, 5k and 10k SSE subscribers, all on one view key, a publisher sends 10 messages/s for a
few seconds; every message reaches every subscriber. Each contender is started fresh for each
size: our gateway in one process, our gateway in ``LV_WORKERS`` processes on one port, nginx +
nchan (an SSE hub in C, published to by HTTP POST), and a naive gateway (one ``XREAD BLOCK``
per subscriber). One more setting spreads messages over 50 keys. The load client
(``bench/loadclient.py``) runs in two processes on the same two cores and reports its CPU.

    .venv/bin/python -m bench.fanout [--quick]

Writes bench/results/fanout.json and bench/results/fanout_{deliveries,latency,cpu}.png.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol

from bench import contenders as c
from bench.common import Report, Row, percentile, raise_open_files, save, save_plot
from bench.loadclient import Clients
from bench.moment import Moment
from liveviews.store.embedded import EmbeddedStore

RATE = 10  # messages per second
DRAIN_SECONDS = 2.0
SPREAD_KEYS = 50
SPREAD_SUBSCRIBERS = 5000
SPREAD_RATE = 100
"""Messages per second in the spread setting, each published on its own, as nchan is sent
them (one POST each): 100 batches/s of one message, each to 100 subscribers."""
SPREAD_PER_BATCH = 10
"""The spread setting again for our gateway as a micro-batch pipeline writes: 10 batches/s of
10 messages on 10 keys. A batch's 1,000 writes then go out back to back, so its p99 is the time
of ~990 of them; nchan cannot be given a batch, so only CPU compares there."""
SPREAD_EVERY_KEY_PROGRESS_MS = 250
"""The spread setting again with every subscriber passed the frontier at the progress interval
(``LV_QUIET_PROGRESS_MS`` = ``LV_PROGRESS_INTERVAL_MS``), as before the quiet rhythm: what
frames to the subscribers whose key did not change cost."""
CLIENT_PROCESSES = 2


class Publisher(Protocol):
    def publish(self, keys: list[str]) -> None: ...
    def close(self) -> None: ...


def measure(
    server: c.Server, store_pids: list[int], publisher: Publisher, subscribers: int,
    keys: list[str], per_batch: int, seconds: float, drain: float = DRAIN_SECONDS,
    rate: int = RATE, request: Callable[[int, str], bytes] | None = None,
) -> tuple[dict[str, Any], list[float]]:  # fmt: skip
    """One setting: connect, publish ``rate`` batches/s of ``per_batch`` messages, count.
    Subscriber ``i`` follows ``keys[i % len(keys)]``, asked for as ``request(i, key)`` says
    (by default, ``server.request(key)``)."""
    ask = request or (lambda _, key: server.request(key))
    requests = [ask(i, keys[i % len(keys)]) for i in range(subscribers)]
    per_key = {k: 0 for k in keys}
    for i in range(subscribers):
        per_key[keys[i % len(keys)]] += 1
    with Clients("127.0.0.1", server.port, requests, CLIENT_PROCESSES) as clients:
        ok, failed = clients.wait_connected()
        time.sleep(1.0)
        clients.reset()
        pids = server.pids()
        cpu0, store0 = c.cpu_seconds(pids), c.cpu_seconds(store_pids)
        t0 = time.monotonic()
        next_at, batches, expected = t0, 0, 0
        while next_at < t0 + seconds:
            batch = [keys[(batches * per_batch + j) % len(keys)] for j in range(per_batch)]
            publisher.publish(batch)
            batches += 1
            expected += sum(per_key[k] for k in batch)
            next_at += 1 / rate
            time.sleep(max(0.0, next_at - time.monotonic()))
        window = time.monotonic() - t0
        in_window = clients.count()
        time.sleep(drain)
        got = clients.collect()
        cpu = c.cpu_seconds(pids) - cpu0
        store_cpu = c.cpu_seconds(store_pids) - store0
        rss = c.rss_bytes(pids)
    lat = got.latencies
    n = got.deliveries
    row: dict[str, Any] = {
        "contender": server.name,
        "processes": len(pids),
        "subscribers": subscribers,
        "connected": ok,
        "refused": failed,
        "keys": len(keys),
        "messages_per_batch": per_batch,
        "messages": batches * per_batch,
        "deliveries": n,
        "deliveries_expected": expected,
        "deliveries_per_second": round(in_window / window, 1),
        "server_cpu_seconds": round(cpu, 3),
        "server_cpu_us_per_delivery": round(cpu / n * 1e6, 2) if n else None,
        "deliveries_per_server_cpu_second": round(n / cpu) if cpu else None,
        "store_cpu_us_per_delivery": round(store_cpu / n * 1e6, 2) if n else None,
        "client_cpu_seconds": round(got.client_cpu_seconds, 3),
        "wall_seconds": round(window + drain, 2),
        "latency_ms": {f"p{q}": round(percentile(lat, q) * 1000, 2) for q in (50, 90, 99)}
        | {"max": round(max(lat) * 1000, 2) if lat else None},
        "server_rss_bytes": rss,
    }
    print(f"{server.name:>14} N={subscribers:>5} keys={len(keys):>2}: "
          f"{row['deliveries_per_second']:>9}/s  {row['server_cpu_us_per_delivery']} us/delivery  "
          f"p50 {row['latency_ms']['p50']} p99 {row['latency_ms']['p99']} ms  "
          f"{n}/{expected}", flush=True)  # fmt: skip
    return row, lat[:: max(1, len(lat) // 20_000)]


Contender = Callable[[], contextlib.AbstractContextManager[c.Server]]


@contextlib.contextmanager
def publisher_for(server: c.Server, store_url: str) -> Iterator[Publisher]:
    pub: Publisher
    if server.name == "nginx+nchan":
        pub = c.NchanPublisher(server.port)
    else:
        pub = c.SinkPublisher(store_url)
    try:
        yield pub
    finally:
        pub.close()


def contenders(store_url: str, quick: bool) -> list[Contender]:
    out: list[Contender] = [lambda: c.liveviews(store_url)]
    if not quick:
        out.append(lambda: c.liveviews(store_url, workers=2))
        if c.ensure_nchan():
            out.append(c.nchan)
    out.append(lambda: c.naive(store_url))
    return out


def spread_over_keys(url: str, store_pids: list[int], seconds: float) -> list[dict[str, Any]]:
    """5k subscribers on 50 keys, 100 messages/s: our gateway and nchan, each message published
    on its own; our gateway again with the messages in batches of 10, and again with every
    subscriber passed the frontier at the progress interval."""
    keys = [f"k{i}" for i in range(SPREAD_KEYS)]
    every_key = {"LV_QUIET_PROGRESS_MS": str(SPREAD_EVERY_KEY_PROGRESS_MS)}
    settings: list[tuple[Contender, int]] = [
        (lambda: c.liveviews(url), 1),
        (lambda: c.liveviews(url, name=f"liveviews, {SPREAD_PER_BATCH} per batch"),
         SPREAD_PER_BATCH),
        (lambda: c.liveviews(url, extra=every_key, name="liveviews, every key's frontier at "
                             f"{SPREAD_EVERY_KEY_PROGRESS_MS} ms"), 1),
    ]  # fmt: skip
    if c.nchan_installed():
        settings.append((c.nchan, 1))
    rows = []
    for make, per_batch in settings:
        with make() as server, publisher_for(server, url) as pub:
            row, _ = measure(server, store_pids, pub, SPREAD_SUBSCRIBERS, keys, per_batch,
                             seconds, rate=SPREAD_RATE // per_batch)  # fmt: skip
        rows.append(row)
    return rows


def run(quick: bool = False) -> Report:
    raise_open_files()
    moment = Moment()
    sizes = [100] if quick else [1000, 5000, 10_000]
    seconds = 2.5 if quick else 6.0
    drain = 1.0 if quick else DRAIN_SECONDS
    started = time.monotonic()
    rows: list[dict[str, Any]] = []
    cdfs: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        store = EmbeddedStore(Path(tmp), c.free_port())
        url = store.start()
        try:
            store_pids = [store.process.pid] if store.process else []
            for make in contenders(url, quick):
                for n in sizes:
                    with make() as server, publisher_for(server, url) as pub:
                        row, lat = measure(server, store_pids, pub, n, ["hot"], 1, seconds, drain)
                    rows.append(row)
                    if n == sizes[-1]:
                        cdfs[row["contender"]] = lat
            spread = [] if quick else spread_over_keys(url, store_pids, seconds)
        finally:
            store.stop()
    figures: dict[str, Any] = {
        "rate_messages_per_second": RATE,
        "publish_seconds": seconds,
        "one_key": rows,
        "spread_over_keys": spread,
        "wall_seconds": round(time.monotonic() - started, 1),
        "client_processes": CLIENT_PROCESSES,
    }
    save("fanout", figures, moment)
    plots = _plots(rows, cdfs, sizes[-1])
    return Report(
        name="fanout",
        title="Gateway fan-out: deliveries, CPU per delivery, latency",
        command="python -m bench.fanout" + (" --quick" if quick else ""),
        figures=figures,
        rows=_summary(rows, sizes[-1]) + _spread_summary(spread),
        plots=plots,
        notes=[
            "Client and servers share the same 2 cores; the client's CPU is in the figures.",
            "Server CPU is utime+stime of the server's processes; the store's is apart.",
        ],
        moment=moment.finish(),
    )


def _find(rows: list[dict[str, Any]], name: str, n: int) -> dict[str, Any] | None:
    return next((r for r in rows if r["contender"] == name and r["subscribers"] == n), None)


def _summary(rows: list[dict[str, Any]], n: int) -> list[Row]:
    ours, nchan, naive = (
        _find(rows, "liveviews", n),
        _find(rows, "nginx+nchan", n),
        _find(rows, "naive", n),
    )
    many = next((r for r in rows if r["contender"].startswith("liveviews x")
                 and r["subscribers"] == n), None)  # fmt: skip
    out: list[Row] = []
    if ours is None:
        return out

    def us(r: dict[str, Any] | None) -> str:
        return f"{r['server_cpu_us_per_delivery']} µs ({r['contender']})" if r else ""

    out.append(Row(f"server CPU per delivery, {n} SSE subscribers",
                   us(ours), "≤ nginx+nchan's", us(nchan)))  # fmt: skip
    out.append(Row(f"delivery latency p99, {n} SSE subscribers, {RATE} msg/s",
                   f"{ours['latency_ms']['p99']} ms", "≤ 50 ms",
                   f"{nchan['latency_ms']['p99']} ms (nginx+nchan)" if nchan else ""))  # fmt: skip
    if naive:
        ratio = (ours["deliveries_per_server_cpu_second"] or 0) / max(
            1, naive["deliveries_per_server_cpu_second"] or 1
        )
        out.append(Row("deliveries per server CPU second",
                       f"{ours['deliveries_per_server_cpu_second']} ({ratio:.1f}x naive)",
                       "≥ 10x naive",
                       f"{naive['deliveries_per_server_cpu_second']} (naive)"))  # fmt: skip
    if many:
        out.append(Row(f"deliveries/s, {n} SSE subscribers, {many['contender']}",
                       f"{many['deliveries_per_second']} (p99 {many['latency_ms']['p99']} ms)",
                       "", f"{ours['deliveries_per_second']} (one process)"))  # fmt: skip
    return out


def _spread_summary(spread: list[dict[str, Any]]) -> list[Row]:
    ours = _find(spread, "liveviews", SPREAD_SUBSCRIBERS)
    if ours is None:
        return []
    others = [r for r in spread if r is not ours]

    def figures(r: dict[str, Any]) -> str:
        return f"{r['server_cpu_us_per_delivery']} µs, p99 {r['latency_ms']['p99']} ms"

    return [Row(f"spread: {SPREAD_SUBSCRIBERS} subscribers on {SPREAD_KEYS} keys, "
                f"{SPREAD_RATE} msg/s: CPU per delivery, p99", figures(ours),
                "≤ nginx+nchan's CPU, p99 ≤ 2x its",
                "; ".join(f"{figures(r)} ({r['contender']})" for r in others))]  # fmt: skip


def _plots(rows: list[dict[str, Any]], cdfs: dict[str, list[float]], n: int) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(dict.fromkeys(r["contender"] for r in rows))
    paths = []
    for figure, field, ylabel in (
        ("fanout_deliveries", "deliveries_per_second", "deliveries/s"),
        ("fanout_cpu", "server_cpu_us_per_delivery", "server CPU µs per delivery"),
    ):
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for name in names:
            mine = [r for r in rows if r["contender"] == name]
            ax.plot([r["subscribers"] for r in mine], [r[field] or 0 for r in mine], "o-",
                    label=name)  # fmt: skip
        ax.set_xlabel(f"SSE subscribers on one key ({RATE} messages/s)")
        ax.set_ylabel(ylabel)
        if field == "server_cpu_us_per_delivery":
            ax.set_yscale("log")
        ax.grid(True, alpha=0.3)
        ax.legend()
        paths.append(save_plot(fig, figure))
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, lat in cdfs.items():
        ordered = sorted(x * 1000 for x in lat)
        if ordered:
            ax.plot(ordered, [(i + 1) / len(ordered) for i in range(len(ordered))], label=name)
    ax.set_xscale("log")
    ax.set_xlabel(f"delivery latency, ms ({n} subscribers, {RATE} messages/s)")
    ax.set_ylabel("fraction of deliveries")
    ax.grid(True, alpha=0.3)
    ax.legend()
    paths.append(save_plot(fig, "fanout_latency"))
    return paths


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="~100 subscribers, a few seconds")
    args = parser.parse_args()
    run(args.quick)
    return 0


if __name__ == "__main__":
    sys.exit(main())
