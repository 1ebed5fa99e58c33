"""Quick fan-out benchmark: N SSE subscribers, deltas written through the real sink.

Starts an embedded store and ``python -m server`` as a subprocess, connects N subscribers
(aiohttp, spread over a few keys so each delta fans out to N/keys clients), writes deltas at
a fixed rate for a while, and reports deliveries per second, gateway CPU seconds per delivery
(from /proc/<pid>/stat), delivery latency (write time in the row value -> client receipt) p50
and p99, and RSS growth per idle subscriber for SSE and WebSocket.

    .venv/bin/python bench/fanout_quick.py [--subscribers 2000] [--rate 100] [--seconds 20]

Results are printed and written to bench/results/fanout_quick.json.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import jwt
import redis

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from demo.chirp import app as chirp  # noqa: E402
from server.settings import DEV_JWT_SECRET  # noqa: E402
from streaming.embedded import EmbeddedStore  # noqa: E402
from streaming.sink import ChangeTopicSink  # noqa: E402

CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime + stime


def rss_bytes(pid: int) -> int:
    return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE


def token(user: str) -> str:
    claims = {"sub": user, "scope": "read publish", "aud": "liveviews",
              "exp": int(time.time()) + 3600}  # fmt: skip
    return jwt.encode(claims, DEV_JWT_SECRET, algorithm="HS256")


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def sse_subscriber(
    session: aiohttp.ClientSession, url: str, latencies: list[float], counts: list[int],
    ready: asyncio.Event, n_ready: list[int], total: int,
) -> None:  # fmt: skip
    async with session.get(url, headers={"Authorization": f"Bearer {token('bench')}"}) as resp:
        assert resp.status == 200, (resp.status, await resp.text())
        buf = b""
        first = True
        async for chunk in resp.content.iter_any():
            now = time.time()
            buf += chunk
            *blocks, buf = buf.split(b"\n\n")
            for block in blocks:
                if first:
                    first = False
                    n_ready[0] += 1
                    if n_ready[0] == total:
                        ready.set()
                if block.startswith(b"event: progress"):
                    counts[1] += 1
                elif block.startswith(b"event: delta"):
                    data = json.loads(block.split(b"data: ", 1)[1])
                    sent = data["ops"][0]["value"]["t"]
                    latencies.append(now - sent)
                    counts[0] += 1


async def idle_clients(base: str, ws_url: str, n: int, kind: str, pid: int) -> float:
    """RSS growth of the gateway per idle subscriber of ``kind``."""
    conn = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=conn) as s:
        await asyncio.sleep(1)
        before = rss_bytes(pid)
        held: list[Any] = []
        for i in range(n):
            if kind == "sse":
                auth = {"Authorization": f"Bearer {token('bench')}"}
                resp = await s.get(f"{base}/v1/views/profiles/idle{i % 50}/live", headers=auth)
                await resp.content.readuntil(b"\n\n")
                held.append(resp)
            else:
                ws = await s.ws_connect(ws_url, params={"access_token": token("bench")})
                await ws.receive()
                sub = {"type": "subscribe", "sub": "a", "view": "profiles", "key": f"idle{i % 50}"}
                await ws.send_str(json.dumps(sub))
                await ws.receive()
                held.append(ws)
        await asyncio.sleep(2)
        after = rss_bytes(pid)
        for h in held:
            if kind == "sse":
                h.close()
            else:
                await h.close()
    return (after - before) / n


async def run(args: argparse.Namespace, base: str, ws_url: str, store_url: str, pid: int
              ) -> dict[str, Any]:  # fmt: skip
    client = redis.Redis.from_url(store_url)
    sink = ChangeTopicSink(client, chirp, "liveviews", 16, 10_000)
    latencies: list[float] = []
    counts = [0, 0]  # delta frames, progress frames received
    ready = asyncio.Event()
    n_ready = [0]
    keys = [f"k{i}" for i in range(args.keys)]
    conn = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=None, sock_read=None)
    async with aiohttp.ClientSession(connector=conn, timeout=timeout) as s:
        tasks = [
            asyncio.create_task(sse_subscriber(
                s, f"{base}/v1/views/likes/{keys[i % len(keys)]}/live", latencies, counts,
                ready, n_ready, args.subscribers))
            for i in range(args.subscribers)
        ]  # fmt: skip
        await asyncio.wait_for(ready.wait(), 120)
        print(f"{args.subscribers} subscribers connected", flush=True)
        await asyncio.sleep(1)
        latencies.clear()
        counts[0] = counts[1] = 0
        cpu0, t0 = cpu_seconds(pid), time.time()
        # Deltas come in micro-batches, as from the pipeline: each batch also advances the
        # frontier once, which every subscriber hears about as a progress frame.
        per_batch = max(1, round(args.rate / args.batches_per_second))
        interval = per_batch / args.rate
        batch = written = 0
        next_at = time.monotonic()
        end = next_at + args.seconds
        while time.monotonic() < end:
            batch += 1
            rows = []
            for _ in range(per_batch):
                written += 1
                value = json.dumps({"t": time.time(), "n": written})
                key = keys[written % len(keys)]
                rows.append({"view": "likes", "key": key, "row": "count", "value": value,
                             "score": 0.0, "partition": None, "offset": None})  # fmt: skip
            rows.append({"view": None, "key": None, "row": None, "value": None, "score": 0.0,
                         "partition": 0, "offset": f"{batch}-0"})  # fmt: skip
            await asyncio.to_thread(sink.write, rows, batch)
            next_at += interval
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))
        await asyncio.sleep(2)  # let the last deltas arrive
        elapsed = time.time() - t0 - 2
        cpu = cpu_seconds(pid) - cpu0
        delivered, progress = counts
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    expected = written * (args.subscribers // args.keys)
    return {
        "subscribers": args.subscribers,
        "keys": args.keys,
        "deltas_written": written,
        "deltas_per_second_written": round(written / args.seconds, 1),
        "micro_batches_per_second": round(batch / args.seconds, 1),
        "deliveries": delivered,
        "deliveries_expected": expected,
        "deliveries_per_second": round(delivered / elapsed, 1),
        "progress_frames_per_second": round(progress / elapsed, 1),
        "server_cpu_seconds": round(cpu, 3),
        "server_cpu_seconds_per_delivery": cpu / delivered if delivered else None,
        "server_cpu_seconds_per_frame": cpu / (delivered + progress) if delivered else None,
        "latency_p50_ms": round(percentile(latencies, 0.50) * 1000, 2),
        "latency_p99_ms": round(percentile(latencies, 0.99) * 1000, 2),
    }


@contextlib.contextmanager
def gateway_process(store_url: str) -> Iterator[tuple[int, str, str]]:
    """``python -m server`` on a free port: (pid, http base, websocket url)."""
    port = free_port()
    env = {**os.environ, "REDIS_URL": store_url, "LV_PORT": str(port),
           "LV_CHANGE_SHARDS": "16", "LV_MAX_CONNECTIONS": "20000",
           "LV_SUBSCRIBER_BUFFER": "1024", "LV_SEND_TIMEOUT_SECONDS": "60"}  # fmt: skip
    gateway = subprocess.Popen(
        [sys.executable, "-c",
         "import resource; resource.setrlimit(resource.RLIMIT_NOFILE, (20000, 20000)); "
         "import runpy; runpy.run_module('server', run_name='__main__')"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.time() + 30
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                    break
            except OSError:
                if time.time() > deadline or gateway.poll() is not None:
                    raise SystemExit("the gateway did not start") from None
                time.sleep(0.1)
        yield gateway.pid, f"http://127.0.0.1:{port}", f"ws://127.0.0.1:{port}/v1/ws"
    finally:
        gateway.terminate()
        gateway.wait(10)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--subscribers", type=int, default=2000)
    parser.add_argument("--keys", type=int, default=20, help="subscribers are spread over these")
    parser.add_argument("--rate", type=float, default=100, help="deltas per second")
    parser.add_argument("--batches-per-second", type=float, default=10,
                        help="micro-batches per second carrying those deltas")
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--idle", type=int, default=1000, help="idle subscribers for memory")
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, 20_000)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, want), hard))
    store_port = free_port()
    with tempfile.TemporaryDirectory() as tmp, EmbeddedStore(Path(tmp), store_port) as store_url:
        # A fresh gateway per measurement, so memory freed by one does not hide the next.
        with gateway_process(store_url) as (pid, base, ws_url):
            result = asyncio.run(run(args, base, ws_url, store_url, pid))
            result["gateway_rss_bytes_after_fanout"] = rss_bytes(pid)
        for kind in ("sse", "ws"):
            with gateway_process(store_url) as (pid, base, ws_url):
                per = asyncio.run(idle_clients(base, ws_url, args.idle, kind, pid))
                result[f"rss_bytes_per_idle_{kind}_subscriber"] = round(per)
    result["command"] = " ".join(["bench/fanout_quick.py", *sys.argv[1:]])
    out = ROOT / "bench" / "results" / "fanout_quick.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
