"""Fan-out through nginx: deliveries per second with 1, 2 and 4 gateway processes behind it.

SSE subscribers on one view key, and a publisher writing one message a micro-batch through the
real sink, ``rate`` times a second, as in ``bench.fanout``. The subscribers connect to nginx,
configured by ``deploy/nginx/`` in front of 1, 2 or 4 ``python -m liveviews.gateway`` processes on
ports of their own; once more to one gateway without nginx, the reference. Two loads: one that every
setting delivers whole (its figures are the CPU each delivery costs the gateways and nginx,
and the latency), and one this machine cannot deliver whole (its figure is deliveries/s).

The load client, nginx, the gateways and the store share this machine's cores, so gateway
processes beyond the core count cannot add throughput here: the figures then show what
nginx adds per delivery and what more processes cost, not how a cluster scales.

    .venv/bin/python -m bench.gateways [--quick]

Writes bench/results/gateways.json.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import contenders as c
from bench.common import Report, Row, percentile, raise_open_files, save, wait_listening
from bench.loadclient import Clients
from bench.moment import Moment
from deploy.nginx import render
from liveviews.store.embedded import EmbeddedStore

GATEWAYS = (1, 2, 4)
ROUNDS = 3
"""Each setting is measured this many times, the settings taking turns: the machine's speed
varies from minute to minute (docs/performance/machine.md), and turns spread that evenly."""
CLIENT_PROCESSES = 2
KEY = "hot"


@dataclass(frozen=True)
class Load:
    subscribers: int
    rate: int
    """Messages per second, each delivered to every subscriber."""

    @property
    def expected_per_second(self) -> int:
        return self.subscribers * self.rate


@dataclass
class Front:
    """Where subscribers connect, and whose CPU each side of it spends."""

    name: str
    gateways: int
    server: c.Server
    gateway_pids: list[int]
    nginx_pids: list[int]


@contextlib.contextmanager
def direct(store_url: str) -> Iterator[Front]:
    """One gateway, subscribers connected to it without nginx."""
    with c.liveviews(store_url, name="1 gateway, no nginx") as server:
        yield Front(server.name, 1, server, server.pids(), [])


@contextlib.contextmanager
def behind_nginx(store_url: str, gateways: int, prefix: Path) -> Iterator[Front]:
    """``gateways`` gateway processes behind nginx with deploy/nginx's configuration."""
    with contextlib.ExitStack() as stack:
        servers = [stack.enter_context(c.liveviews(store_url, name=f"gateway {i}"))
                   for i in range(gateways)]  # fmt: skip
        port = c.free_port()
        render.write([f"127.0.0.1:{s.port}" for s in servers], f"127.0.0.1:{port}", prefix)
        proc = subprocess.Popen(render.command(prefix), stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)  # fmt: skip
        stack.callback(c.stop, proc)
        wait_listening(port, proc)
        name = f"nginx + {gateways} gateway" + ("s" if gateways > 1 else "")
        front = c.Server(name, port, proc, servers[0].path, servers[0].headers)
        yield Front(name, gateways, front, [p for s in servers for p in s.pids()], front.pids())


def measure(front: Front, store_url: str, store_pids: list[int], load: Load, seconds: float,
            drain: float) -> dict[str, Any]:  # fmt: skip
    """Connect ``load.subscribers``, publish ``load.rate`` messages/s for ``seconds``, count."""
    server = front.server
    requests = [server.request(KEY)] * load.subscribers
    publisher = c.SinkPublisher(store_url)
    try:
        with Clients("127.0.0.1", server.port, requests, CLIENT_PROCESSES) as clients:
            ok, failed = clients.wait_connected()
            time.sleep(1.0)
            clients.reset()
            cpu0 = [c.cpu_seconds(p) for p in (front.gateway_pids, front.nginx_pids, store_pids)]
            t0 = time.monotonic()
            next_at, messages = t0, 0
            while next_at < t0 + seconds:
                publisher.publish([KEY])
                messages += 1
                next_at += 1 / load.rate
                time.sleep(max(0.0, next_at - time.monotonic()))
            window = time.monotonic() - t0
            in_window = clients.count()
            time.sleep(drain)
            got = clients.collect()
            gw_cpu, nginx_cpu, store_cpu = (
                c.cpu_seconds(p) - before
                for p, before in zip((front.gateway_pids, front.nginx_pids, store_pids), cpu0,
                                     strict=True)
            )  # fmt: skip
    finally:
        publisher.close()
    n, lat = got.deliveries, got.latencies

    def per_delivery(cpu: float) -> float | None:
        return round(cpu / n * 1e6, 2) if n else None

    row: dict[str, Any] = {
        "setting": front.name,
        "gateways": front.gateways,
        "nginx": bool(front.nginx_pids),
        "subscribers": load.subscribers,
        "connected": ok,
        "refused": failed,
        "rate_messages_per_second": load.rate,
        "deliveries": n,
        "deliveries_expected": messages * load.subscribers,
        "deliveries_per_second": round(in_window / window, 1),
        "deliveries_per_second_offered": load.expected_per_second,
        "gateway_cpu_us_per_delivery": per_delivery(gw_cpu),
        "nginx_cpu_us_per_delivery": per_delivery(nginx_cpu),
        "store_cpu_us_per_delivery": per_delivery(store_cpu),
        "client_cpu_us_per_delivery": per_delivery(got.client_cpu_seconds),
        "cores_busy": round(
            (gw_cpu + nginx_cpu + store_cpu + got.client_cpu_seconds) / (window + drain), 2
        ),  # fmt: skip
        "latency_ms": {f"p{q}": round(percentile(list(lat), q) * 1000, 1) for q in (50, 99)},
    }
    print(f"{front.name:>22} N={load.subscribers} {load.rate:>3} msg/s: "
          f"{row['deliveries_per_second']:>9}/s of {load.expected_per_second}  gateways "
          f"{row['gateway_cpu_us_per_delivery']} us + nginx {row['nginx_cpu_us_per_delivery']} us"
          f"/delivery  p50 {row['latency_ms']['p50']} p99 {row['latency_ms']['p99']} ms",
          flush=True)  # fmt: skip
    return row


def run(quick: bool = False, rounds: int = 0) -> Report:
    if shutil.which("nginx") is None:
        raise RuntimeError(
            "nginx is not installed: apt-get install nginx (scripts/setup.sh installs it)."
        )
    raise_open_files()
    moment = Moment()
    subscribers = 100 if quick else 5000
    loads = [Load(subscribers, 10)] if quick else [Load(subscribers, 10), Load(subscribers, 40)]
    counts = (2,) if quick else GATEWAYS
    seconds, drain = (2.0, 1.0) if quick else (6.0, 2.0)
    rounds = rounds or (1 if quick else ROUNDS)
    started = time.monotonic()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="lv-gateways-") as tmp:
        store = EmbeddedStore(Path(tmp) / "store", c.free_port())
        url = store.start()
        try:
            store_pids = [store.process.pid] if store.process else []
            for turn in range(rounds):
                for load in loads:
                    for n in (0, *counts):  # 0: one gateway without nginx
                        prefix = Path(tmp) / f"nginx-{turn}-{load.rate}-{n}"
                        with direct(url) if n == 0 else behind_nginx(url, n, prefix) as front:
                            row = measure(front, url, store_pids, load, seconds, drain)
                        rows.append({"round": turn + 1, **row})
        finally:
            store.stop()
    medians = _medians(rows)
    figures: dict[str, Any] = {
        "subscribers": subscribers,
        "publish_seconds": seconds,
        "rounds": rounds,
        "client_processes": CLIENT_PROCESSES,
        "cores": os.cpu_count(),
        "medians": medians,
        "rows": rows,
        "wall_seconds": round(time.monotonic() - started, 1),
    }
    save("gateways", figures, moment)
    return Report(
        name="gateways",
        title="Fan-out through nginx with 1, 2 and 4 gateway processes",
        command="python -m bench.gateways" + (" --quick" if quick else ""),
        figures=figures,
        rows=_summary(medians),
        notes=[
            f"Load client, nginx, gateways and store share the same {os.cpu_count()} cores: "
            "gateway processes beyond that cannot add throughput here. Each figure is the "
            + (
                f"median of {rounds} rounds, the settings taking turns."
                if rounds > 1
                else "figure of one round."
            ),
        ],
        moment=moment.finish(),
    )


MEDIAN_OF = ("deliveries_per_second", "gateway_cpu_us_per_delivery",
             "nginx_cpu_us_per_delivery", "client_cpu_us_per_delivery", "refused")  # fmt: skip


def _medians(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per setting and load: the median of each figure over the rounds in which every
    subscriber connected (on a shared machine, another program may take a free port first)."""
    out: dict[tuple[str, int], dict[str, Any]] = {}
    rows = [r for r in rows if r["connected"] == r["subscribers"]]
    for r in rows:
        key = (r["setting"], r["rate_messages_per_second"])
        med = out.setdefault(key, {"setting": r["setting"], "gateways": r["gateways"],
                                   "nginx": r["nginx"], "subscribers": r["subscribers"],
                                   "rate_messages_per_second": r["rate_messages_per_second"],
                                   "deliveries_per_second_offered":
                                       r["deliveries_per_second_offered"]})  # fmt: skip
        mine = [x for x in rows if (x["setting"], x["rate_messages_per_second"]) == key]
        med["rounds"] = len(mine)
        for name in MEDIAN_OF:
            med[name] = round(statistics.median(x[name] or 0 for x in mine), 2)
        for q in ("p50", "p99"):
            med[f"latency_{q}_ms"] = round(statistics.median(x["latency_ms"][q] for x in mine), 1)
    return list(out.values())


def _summary(medians: list[dict[str, Any]]) -> list[Row]:
    out = []
    for rate in sorted({m["rate_messages_per_second"] for m in medians}):
        mine = [m for m in medians if m["rate_messages_per_second"] == rate]
        ref = mine[0]
        for m in mine[1:]:
            out.append(Row(
                f"{m['setting']}, {m['subscribers']} SSE subscribers, {rate} msg/s: "
                "deliveries/s; CPU per delivery (gateways + nginx); p99",
                f"{m['deliveries_per_second']:.0f}; {m['gateway_cpu_us_per_delivery']} + "
                f"{m['nginx_cpu_us_per_delivery']} µs; {m['latency_p99_ms']} ms",
                f"{m['deliveries_per_second_offered']}/s offered",
                f"{ref['deliveries_per_second']:.0f}; {ref['gateway_cpu_us_per_delivery']} µs; "
                f"{ref['latency_p99_ms']} ms (no nginx)",
            ))  # fmt: skip
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="100 subscribers, a few seconds")
    parser.add_argument("--rounds", type=int, default=0, help=f"rounds (default {ROUNDS})")
    args = parser.parse_args()
    run(args.quick, args.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
