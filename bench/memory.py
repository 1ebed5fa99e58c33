"""Memory per idle subscriber: the gateway's RSS growth over N idle SSE or WebSocket streams.

A fresh gateway process per transport; subscribers are added in steps (each step its own
load-client processes, spread over 50 keys) and the gateway's RSS is read after each step
settles. The figure is (RSS at N - RSS at the first step) / (N - first step).

    .venv/bin/python -m bench.memory [--quick]

Writes bench/results/memory.json and bench/results/memory.png.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

from bench import contenders as c
from bench.common import Report, Row, raise_open_files, save, save_plot
from bench.loadclient import Clients, Request, ws_text_frame
from bench.moment import Moment
from liveviews.store.embedded import EmbeddedStore

KEYS = 50
TARGET_BYTES = 8 * 1024
SETTLE_SECONDS = 2.0
QUICK_SETTLE_SECONDS = 0.2
"""A quick run's figures mean nothing; it only checks the harness."""


def _requests(server: c.Server, kind: str, n: int, first: int) -> list[Request]:
    out: list[Request] = []
    tok = c.token(scope="read")
    for i in range(first, first + n):
        key = f"idle{i % KEYS}"
        if kind == "sse":
            out.append(server.request(key))
            continue
        head = (f"GET /v1/ws?access_token={tok} HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n"
                "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
                f"Sec-WebSocket-Key: {base64.b64encode(os.urandom(16)).decode()}\r\n"
                "\r\n")  # fmt: skip
        sub = orjson.dumps({"type": "subscribe", "sub": "s", "view": c.VIEW, "key": key})
        out.append((head.encode(), ws_text_frame(sub.decode())))
    return out


def grow(
    contender: contextlib.AbstractContextManager[c.Server], kind: str, steps: list[int],
    settle: float = SETTLE_SECONDS,
) -> list[tuple[int, int]]:  # fmt: skip
    """(subscribers, server RSS bytes) after each step."""
    points: list[tuple[int, int]] = []
    with contender as server, contextlib.ExitStack() as clients:
        have = 0
        for n in steps:
            if n > have:
                batch = Clients("127.0.0.1", server.port, _requests(server, kind, n - have, have))
                clients.enter_context(batch)
                ok, failed = batch.wait_connected()
                if failed:
                    raise RuntimeError(f"{failed} of {n - have} {kind} subscribers were refused")
                have = n
            time.sleep(settle)
            points.append((n, c.rss_bytes(server.pids())))
            print(f"{server.name} {kind}: {n} subscribers, RSS {points[-1][1] / 2**20:.1f} MiB",
                  flush=True)  # fmt: skip
    return points


def run(quick: bool = False) -> Report:
    raise_open_files()
    moment = Moment()
    n = 200 if quick else 10_000
    steps = [20, n // 2, n] if quick else [100, 2500, 5000, 7500, n]
    figures: dict[str, Any] = {"subscribers": n, "target_bytes_per_subscriber": TARGET_BYTES}
    with tempfile.TemporaryDirectory() as tmp, EmbeddedStore(Path(tmp), c.free_port()) as url:
        for kind in ("sse", "ws"):
            settle = QUICK_SETTLE_SECONDS if quick else SETTLE_SECONDS
            points = grow(c.liveviews(url), kind, steps, settle)
            floor = grow(c.idle_asgi(), kind, steps, settle)
            figures[kind] = {
                "points": [{"subscribers": a, "rss_bytes": b} for a, b in points],
                "bytes_per_subscriber": _per_subscriber(points),
                "bare_uvicorn_points": [{"subscribers": a, "rss_bytes": b} for a, b in floor],
                "bare_uvicorn_bytes_per_subscriber": _per_subscriber(floor),
            }
    save("memory", figures, moment)
    rows = [
        Row(
            f"memory per idle {kind.upper()} subscriber (RSS growth / N, N = {n})",
            f"{figures[kind]['bytes_per_subscriber'] / 1024:.1f} KiB",
            "≤ 8 KiB",
            f"bare ASGI app on the same uvicorn: "
            f"{figures[kind]['bare_uvicorn_bytes_per_subscriber'] / 1024:.1f} KiB",
        )  # fmt: skip
        for kind in ("sse", "ws")
    ]
    return Report(
        name="memory",
        title="Gateway memory per idle subscriber",
        command="python -m bench.memory" + (" --quick" if quick else ""),
        figures=figures,
        rows=rows,
        plots=[_plot(figures)],
        moment=moment.finish(),
    )


def _per_subscriber(points: list[tuple[int, int]]) -> int:
    (n0, rss0), (n1, rss1) = points[0], points[-1]
    return round((rss1 - rss0) / (n1 - n0))


def _plot(figures: dict[str, Any]) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for kind in ("sse", "ws"):
        for points, per, name, style in (
            ("points", "bytes_per_subscriber", "Liveviews", "o-"),
            ("bare_uvicorn_points", "bare_uvicorn_bytes_per_subscriber", "bare uvicorn", "x--"),
        ):
            pts = figures[kind][points]
            ax.plot(
                [p["subscribers"] for p in pts],
                [p["rss_bytes"] / 2**20 for p in pts],
                style,
                label=f"{name} {kind.upper()} ({figures[kind][per] / 1024:.1f} KiB each)",
            )
    ax.set_xlabel("idle subscribers")
    ax.set_ylabel("server RSS, MiB")
    ax.grid(True, alpha=0.3)
    ax.legend()
    return save_plot(fig, "memory")


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="200 subscribers")
    run(parser.parse_args().quick)
    return 0


if __name__ == "__main__":
    sys.exit(main())
