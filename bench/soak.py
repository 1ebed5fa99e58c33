"""Soak: many SSE subscribers for many minutes; does the gateway's memory or fd count creep?

Starts an embedded store and ``python -m liveviews.gateway`` as a subprocess, connects N SSE
subscribers (a lean asyncio client in two worker processes, spread over N/fan-out keys), and writes
deltas at a steady rate through the real change-topic sink (``ChangeTopicSink``, as the pipeline
writes them; no Spark, so that the machine's two cores go to the gateway and its clients), with
a frontier advance every few seconds. Every ``--sample`` seconds it records the gateway's RSS
and open file descriptors (/proc), the deliveries per second and a delivery-latency sample.

At the end it fits a line to RSS and fds over the last 80% of the run (after warm-up) and says
whether they stayed flat; it writes ``bench/results/soak.json`` and ``bench/results/soak.png``.

    .venv/bin/python -m bench.soak [--subscribers 10000] [--minutes 10] [--rate 100]
    .venv/bin/python -m bench.soak --quick        # ~200 subscribers, ~20 s
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing as mp
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import orjson
import redis

from bench.common import free_port, percentile, raise_open_files, results_dir, save, token
from bench.moment import Moment
from liveviews.store.embedded import EmbeddedStore

ROOT = Path(__file__).resolve().parents[1]
PAGE = os.sysconf("SC_PAGE_SIZE")
SHARDS = 16
DELTA = b"event: delta"
STAMP = b'"t":'
WORKERS = 2
CONNECT_CONCURRENCY = 200
WARM_UP = 0.2
"""The first fifth of the run is warm-up; flatness is judged on the rest."""


# --- the client: one asyncio protocol per SSE stream, counting deltas without parsing -------


class Tally:
    def __init__(self) -> None:
        self.deliveries = 0
        self.latencies: list[float] = []
        self.open = 0
        self.ended = 0


class Stream(asyncio.Protocol):
    """Counts ``event: delta`` lines; takes one latency sample from each chunk's last stamp."""

    def __init__(self, tally: Tally, request: bytes, opened: asyncio.Future[None]) -> None:
        self.tally, self.request, self.opened = tally, request, opened
        self.tail = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.write(self.request)  # type: ignore[attr-defined]

    def data_received(self, data: bytes) -> None:
        if not self.opened.done():
            if not data.startswith(b"HTTP/1.1 200"):
                self.opened.set_exception(RuntimeError(data[:300].decode(errors="replace")))
                return
            self.tally.open += 1
            self.opened.set_result(None)
        chunk = self.tail + data
        self.tally.deliveries += chunk.count(DELTA)
        self.tail = chunk[-(len(DELTA) - 1) :]
        at = data.rfind(STAMP)
        if at >= 0:
            end = data.find(b"}", at)
            if end > 0:
                self.tally.latencies.append(time.time() - float(data[at + len(STAMP) : end]))

    def connection_lost(self, exc: Exception | None) -> None:
        if self.opened.done() and not self.opened.exception():
            self.tally.open -= 1
            self.tally.ended += 1
        elif not self.opened.done():
            self.opened.set_exception(ConnectionError("closed before the stream started"))


async def _client(port: int, paths: list[str], pipe: Connection) -> None:
    loop = asyncio.get_running_loop()
    tally = Tally()
    auth = token("soak", "read", 24 * 3600)
    gate = asyncio.Semaphore(CONNECT_CONCURRENCY)
    transports: list[asyncio.BaseTransport] = []

    async def connect(path: str) -> None:
        request = (f"GET {path} HTTP/1.1\r\nHost: soak\r\nAuthorization: Bearer {auth}\r\n"
                   "Accept: text/event-stream\r\n\r\n").encode()  # fmt: skip
        async with gate:
            opened: asyncio.Future[None] = loop.create_future()
            transport, _ = await loop.create_connection(
                lambda: Stream(tally, request, opened), "127.0.0.1", port
            )
            transports.append(transport)
            await opened

    results = await asyncio.gather(*(connect(p) for p in paths), return_exceptions=True)
    failures = [repr(r) for r in results if isinstance(r, BaseException)]
    pipe.send({"connected": tally.open, "failures": failures[:5], "failed": len(failures)})
    while True:
        command = await loop.run_in_executor(None, pipe.recv)
        if command == "stop":
            break
        lat, tally.latencies = tally.latencies, []
        sample = lat[:: max(1, len(lat) // 500)]
        pipe.send({"deliveries": tally.deliveries, "latencies": sample, "open": tally.open,
                   "ended": tally.ended})  # fmt: skip
    for t in transports:
        t.close()
    pipe.send("stopped")


def _client_process(port: int, paths: list[str], pipe: Connection) -> None:
    raise_open_files()
    import uvloop

    uvloop.run(_client(port, paths, pipe))


# --- the writer: deltas through the real sink, a frontier advance every few seconds ----------


class Pump:
    def __init__(self, store_url: str, keys: list[str], rate: float, progress_every: float):
        from demo.chirp import app
        from liveviews.pipeline.sink import ChangeTopicSink

        self.client = redis.Redis.from_url(store_url)
        # Through the sink of the pipeline that writes "likes": its subscribers follow its frontier.
        self.sink = ChangeTopicSink(self.client, app, app.owner_of("likes") or "", SHARDS, 10_000)
        self.keys, self.rate, self.progress_every = keys, rate, progress_every
        self.written = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        batches_per_second = 10.0
        per_batch = max(1, round(self.rate / batches_per_second))
        interval = per_batch / self.rate
        batch, next_at, next_progress = 0, time.monotonic(), time.monotonic()
        while not self.stop.is_set():
            batch += 1
            now = time.time()
            rows: list[dict[str, Any]] = []
            for _ in range(per_batch):
                self.written += 1
                rows.append({"view": "likes", "key": self.keys[self.written % len(self.keys)],
                             "row": "count", "value": orjson.dumps({"t": now}).decode(),
                             "score": 0.0})  # fmt: skip
            read_to: dict[int, str] = {}
            if time.monotonic() >= next_progress:
                next_progress += self.progress_every
                read_to = {0: f"{batch}-0"}
            self.sink.write(rows, batch, read_to)
            next_at += interval
            self.stop.wait(max(0.0, next_at - time.monotonic()))


# --- the gateway under test -----------------------------------------------------------------


def start_gateway(store_url: str, port: int, subscribers: int) -> subprocess.Popen[bytes]:
    env = {**os.environ, "REDIS_URL": store_url, "LV_PORT": str(port),
           "LV_CHANGE_SHARDS": str(SHARDS), "LV_MAX_CONNECTIONS": str(subscribers + 100),
           # The subscribers are one user on one address: no per-subject or per-address cap.
           "LV_MAX_CONNECTIONS_PER_SUBJECT": "0", "LV_MAX_CONNECTIONS_PER_ADDRESS": "0",
           "LV_STATIC_DIR": "off", "LV_CLIENT_JS_DIR": "off", "LV_LOG_FEED": "false"}  # fmt: skip
    gateway = subprocess.Popen(
        [sys.executable, "-m", "liveviews.gateway"], cwd=ROOT, env=env,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + 30
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return gateway
        except OSError:
            if time.monotonic() > deadline or gateway.poll() is not None:
                gateway.kill()
                raise SystemExit("the gateway did not start") from None
            time.sleep(0.1)


def rss_bytes(pid: int) -> int:
    return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of ``ys`` against ``xs``."""
    n = len(xs)
    if n < 2:
        return 0.0
    mx, my = sum(xs) / n, sum(ys) / n
    var = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / var if var else 0.0


def flatness(samples: list[dict[str, Any]], subscribers: int) -> dict[str, Any]:
    """Growth over the last 80% of the run, from a fitted line, and whether it is flat."""
    end = samples[-1]["t"]
    tail = [s for s in samples if s["t"] >= WARM_UP * end]
    ts = [s["t"] for s in tail]
    span = ts[-1] - ts[0] if len(ts) > 1 else 0.0
    rss_growth = slope(ts, [s["rss_bytes"] for s in tail]) * span
    fds_growth = slope(ts, [s["fds"] for s in tail]) * span
    mean_rss = sum(s["rss_bytes"] for s in tail) / len(tail)
    rss_limit = max(16 * 2**20, 0.05 * mean_rss)
    fds_limit = max(10.0, 0.005 * subscribers)
    return {
        "judged_from_s": round(ts[0], 1),
        "rss_growth_after_warm_up_mib": round(rss_growth / 2**20, 2),
        "rss_growth_limit_mib": round(rss_limit / 2**20, 2),
        "fds_growth_after_warm_up": round(fds_growth, 1),
        "fds_growth_limit": fds_limit,
        "rss_flat": rss_growth < rss_limit,
        "fds_flat": fds_growth < fds_limit,
    }


def plot(samples: list[dict[str, Any]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = [s["t"] / 60 for s in samples]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 7), sharex=True)
    rss = [s["rss_bytes"] / 2**20 for s in samples]
    top.plot(t, rss, color="tab:blue", linewidth=2.5)
    top.set_ylabel("gateway RSS (MiB)", color="tab:blue")
    top.set_ylim(0, max(rss) * 1.3)  # a flat line must not hide under the frame
    fds = top.twinx()
    fds.plot(t, [s["fds"] for s in samples], color="tab:orange", linestyle="--")
    fds.set_ylabel("open file descriptors", color="tab:orange")
    fds.set_ylim(0, max(s["fds"] for s in samples) * 1.6)
    top.axvline(WARM_UP * t[-1], color="grey", linestyle=":", label="end of warm-up")
    top.set_title(title)
    bottom.plot(t, [s["deliveries_per_second"] for s in samples], color="tab:green")
    bottom.set_ylabel("deliveries / s")
    lat = bottom.twinx()
    lat.plot(t, [s["latency_p99_ms"] for s in samples], color="tab:red", alpha=0.6)
    lat.set_ylabel("latency p99 (ms)", color="tab:red")
    bottom.set_xlabel("minutes")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def soak(args: argparse.Namespace) -> dict[str, Any]:
    hard = raise_open_files()
    if args.subscribers + 200 > hard:
        raise SystemExit(f"{args.subscribers} subscribers need more than {hard} open files")
    keys = [f"soak{i}" for i in range(max(1, args.subscribers // args.fan_out))]
    paths = [f"/v1/views/likes/{keys[i % len(keys)]}/live" for i in range(args.subscribers)]
    seconds = args.minutes * 60
    with tempfile.TemporaryDirectory() as tmp, EmbeddedStore(Path(tmp), free_port()) as url:
        port = free_port()
        gateway = start_gateway(url, port, args.subscribers)
        ctx = mp.get_context("spawn")
        pipes, procs = [], []
        try:
            for w in range(WORKERS):
                mine, theirs = ctx.Pipe()
                p = ctx.Process(target=_client_process, args=(port, paths[w::WORKERS], theirs))
                p.start()
                pipes.append(mine)
                procs.append(p)
            t_connect = time.monotonic()
            hello = [pipe.recv() for pipe in pipes]
            connected = sum(h["connected"] for h in hello)
            connect_s = time.monotonic() - t_connect
            print(f"{connected} of {args.subscribers} subscribers connected in {connect_s:.1f} s",
                  flush=True)  # fmt: skip
            pump = Pump(url, keys, args.rate, args.progress_every)
            pump.thread.start()
            samples: list[dict[str, Any]] = []
            start = time.monotonic()
            last_deliveries, last_t = 0, start
            while time.monotonic() - start < seconds:
                time.sleep(min(args.sample, max(0.0, seconds - (time.monotonic() - start))))
                for pipe in pipes:
                    pipe.send("sample")
                reports = [pipe.recv() for pipe in pipes]
                now = time.monotonic()
                deliveries = sum(r["deliveries"] for r in reports)
                per_second = (deliveries - last_deliveries) / (now - last_t)
                lat = [x for r in reports for x in r["latencies"]]
                sample = {
                    "t": round(now - start, 2),
                    "rss_bytes": rss_bytes(gateway.pid),
                    "fds": open_fds(gateway.pid),
                    "open_streams": sum(r["open"] for r in reports),
                    "ended_streams": sum(r["ended"] for r in reports),
                    "deliveries_per_second": round(per_second, 1),
                    "latency_p50_ms": round(percentile(lat, 50) * 1000, 1),
                    "latency_p99_ms": round(percentile(lat, 99) * 1000, 1),
                }
                last_deliveries, last_t = deliveries, now
                samples.append(sample)
                print(" ".join(f"{k}={v}" for k, v in sample.items()), flush=True)
            pump.stop.set()
            pump.thread.join(5)
            written = pump.written
        finally:
            for pipe in pipes:
                with contextlib.suppress(OSError):
                    pipe.send("stop")
            for p in procs:
                p.join(30)
                if p.is_alive():
                    p.kill()
            gateway.terminate()
            try:
                gateway.wait(15)
            except subprocess.TimeoutExpired:
                gateway.kill()
                gateway.wait(5)
    flat = flatness(samples, args.subscribers)
    steady = [s for s in samples if s["t"] >= WARM_UP * samples[-1]["t"]]
    return {
        "command": "python -m bench.soak " + " ".join(sys.argv[1:]),
        "writes": "deltas through liveviews.pipeline.sink.ChangeTopicSink (no Spark)",
        "subscribers": args.subscribers,
        "subscribers_connected": connected,
        "connect_seconds": round(connect_s, 1),
        "keys": len(keys),
        "fan_out": args.fan_out,
        "minutes": args.minutes,
        "deltas_per_second": args.rate,
        "deltas_written": written,
        "progress_every_seconds": args.progress_every,
        "deliveries_per_second_expected": round(args.rate * args.subscribers / len(keys), 1),
        "deliveries_per_second_mean": round(
            sum(s["deliveries_per_second"] for s in steady) / len(steady), 1
        ),
        "latency_p50_ms_median": percentile([s["latency_p50_ms"] for s in steady], 50),
        "latency_p99_ms_worst": max(s["latency_p99_ms"] for s in steady),
        "rss_mib_start": round(samples[0]["rss_bytes"] / 2**20, 1),
        "rss_mib_end": round(samples[-1]["rss_bytes"] / 2**20, 1),
        "fds_start": samples[0]["fds"],
        "fds_end": samples[-1]["fds"],
        "streams_ended_by_gateway": samples[-1]["ended_streams"],
        **flat,
        "samples": samples,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--subscribers", type=int, default=10_000)
    parser.add_argument("--minutes", type=float, default=10)
    parser.add_argument("--rate", type=float, default=100, help="deltas written per second")
    parser.add_argument("--fan-out", type=int, default=10, help="subscribers per key")
    parser.add_argument(
        "--progress-every",
        type=float,
        default=5.0,
        help="seconds between frontier advances (each reaches every subscriber)",
    )
    parser.add_argument("--sample", type=float, default=5.0, help="seconds between samples")
    parser.add_argument("--quick", action="store_true", help="200 subscribers for 20 s")
    args = parser.parse_args(argv)
    if args.quick:
        args.subscribers, args.minutes, args.sample = 200, 1 / 3, 1.0
    moment = Moment()
    figures = soak(args)
    save("soak", figures, moment)
    path = results_dir() / "soak.png"
    plot(figures["samples"], path,
         f"Soak: {args.subscribers} SSE subscribers, {args.rate:g} deltas/s")  # fmt: skip
    print(f"plot: {path}")
    verdict = figures["rss_flat"] and figures["fds_flat"]
    print(f"{'FLAT' if verdict else 'NOT FLAT'}: after warm-up RSS grew "
          f"{figures['rss_growth_after_warm_up_mib']} MiB, fds grew "
          f"{figures['fds_growth_after_warm_up']}")  # fmt: skip
    return 0 if verdict else 1


if __name__ == "__main__":
    sys.exit(main())
