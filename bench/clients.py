"""The Python client beside the JavaScript client: deltas applied per CPU second, on the same
gateway, following one busy key and following many keys.

    .venv/bin/python -m bench.clients [--quick] [--seconds 10] [--rounds 2]

A gateway process serves a fresh embedded store; a publisher in this process writes rows of
Chirp's ``likes`` view through the real sink, as fast as it can, one micro-batch per round of
keys. A follower process subscribes to the keys over WebSocket and counts the deltas it applies
with the state kept: ``python -m bench.follow`` (``liveviews.client``) or ``node
bench/js/follow.mjs`` (``client-js`` under Node). Each reports its own CPU time; the figure is
deltas applied per CPU second of the follower, with the share of the deltas written that it
applied (a follower that falls behind is resumed by the gateway as a slow consumer). Followers
alternate, round by round.
"""

from __future__ import annotations

import argparse
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

from bench import contenders as c
from bench.common import Report, Row, save, token
from bench.moment import Moment
from liveviews.store.embedded import EmbeddedStore

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = {"one busy key": 1, "many keys": 100}
"""How many keys the follower subscribes to (100: a socket's default limit of subscriptions);
every micro-batch changes each of them once."""
READY_S = 60.0
FOLLOWERS = ("python", "javascript")


def follower(kind: str, url: str, keys: list[str]) -> subprocess.Popen[str]:
    args = [url, token(scope="read"), c.VIEW, *keys]
    command = (
        [sys.executable, "-m", "bench.follow", *args]
        if kind == "python"
        else ["node", "--experimental-websocket", "--no-warnings", "bench/js/follow.mjs", *args]
    )
    proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})  # fmt: skip
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], READY_S)
    line = proc.stdout.readline().strip() if ready else ""
    if line != "ready":
        proc.kill()
        proc.wait()
        raise RuntimeError(f"the {kind} follower did not start within {READY_S:.0f} s: {line!r}")
    return proc


def one_run(kind: str, url: str, publisher: c.SinkPublisher, keys: list[str],
            seconds: float) -> dict[str, Any]:  # fmt: skip
    proc = follower(kind, url, keys)
    written, began = 0, time.monotonic()
    try:
        while time.monotonic() - began < seconds:
            publisher.publish(keys)
            written += len(keys)
        time.sleep(1.0)  # the deltas in flight arrive
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    report = orjson.loads(out.strip().splitlines()[-1])
    return {
        "written": written,
        "applied": report["deltas"],
        "cpu_s": round(report["cpu_s"], 3),
        "deltas_per_cpu_s": round(report["deltas"] / max(report["cpu_s"], 1e-6)),
    }


def run(quick: bool = False, seconds: float = 10.0, rounds: int = 2,
        name: str = "clients") -> Report:  # fmt: skip
    if quick:
        seconds, rounds = 2.0, 1
    moment = Moment()
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {
        s: {f: [] for f in FOLLOWERS} for s in SCENARIOS
    }
    with tempfile.TemporaryDirectory() as tmp:
        store = EmbeddedStore(Path(tmp), c.free_port())
        url = store.start()
        try:
            with c.liveviews(url) as server:
                gateway = f"http://127.0.0.1:{server.port}"
                publisher = c.SinkPublisher(url)
                try:
                    for r in range(rounds):
                        for scenario, n in SCENARIOS.items():
                            keys = [f"k{i}" for i in range(n)]
                            for kind in FOLLOWERS if r % 2 == 0 else reversed(FOLLOWERS):
                                runs[scenario][kind].append(
                                    one_run(kind, gateway, publisher, keys, seconds)
                                )
                finally:
                    publisher.close()
        finally:
            store.stop()
    figures: dict[str, Any] = {"seconds": seconds, "rounds": rounds, "runs": runs}
    save(name, figures, moment)

    def each(scenario: str, kind: str) -> str:
        return " / ".join(f"{r['deltas_per_cpu_s']:,} ({r['applied'] / max(r['written'], 1):.0%})"
                          for r in runs[scenario][kind])  # fmt: skip

    rows = [
        Row(f"{kind} client, {scenario}: deltas applied per CPU second (share of those written), "
            "each round", each(scenario, kind),
            baseline=f"javascript: {each(scenario, 'javascript')}" if kind == "python" else "")
        for scenario in SCENARIOS for kind in FOLLOWERS
    ]  # fmt: skip
    return Report("clients", "The Python client beside the JavaScript client",
                  "python -m bench.clients", figures, rows, moment=moment.finish())  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.clients",
                                     description=__doc__.split("\n\n")[0])  # fmt: skip
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    report = run(args.quick, args.seconds, args.rounds)
    for row in report.rows:
        print(f"{row.figure}: {row.measured}")


if __name__ == "__main__":
    main()
