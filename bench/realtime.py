"""What queries in Spark's Real-Time Mode cost: the board's three declared pipelines with
0, 1, 2 and 3 of them in the mode (``LV_REALTIME=off``, ``demo.board.realtime``, the board as
declared), each run on its own.

Each configuration starts a store and ``python -m liveviews.pipeline`` as ``make run`` does,
seeds the board, waits until the views reflect it, then measures the driver JVM's CPU for
``--seconds`` with no event (idle: a query in Real-Time Mode keeps a reader blocking on the
log and a task per state partition for as long as it runs) and for ``--seconds`` at
``--rate`` board events per second. The difference between configurations is what one more
query in the mode costs; its task slots are in the report too.

    .venv/bin/python -m bench.realtime [--quick] [--seconds 30] [--rate 100]
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from bench.common import Report, Row, save
from bench.moment import Moment
from bench.system import jvm_cpu, running_store
from demo.board.activity import Activity, seed_events
from demo.board.app import app as board
from liveviews.log.eventlog import EventLog

COUNTS = [0, 1, 2, 3]
APPS = {0: "demo.board.app:app", 1: "demo.board.realtime:ONE", 2: "demo.board.realtime:TWO",
        3: "demo.board.app:app"}  # fmt: skip


def measure(count: int, seconds: float, rate: int) -> dict[str, Any]:
    """One configuration: the driver JVM's CPU seconds idle and under load."""
    with running_store() as system:
        log = EventLog(system.client, board, 4)
        log.append_batch(seed_events(int(time.time() * 1000)))
        system.start_pipeline({"LV_APP": APPS[count], "LV_REALTIME": "on" if count else "off"})
        system.wait_until_caught_up(timeout=300)
        jvm = system.driver_jvm()
        assert jvm is not None, "no driver JVM"
        time.sleep(2.0)  # the first epochs' start-up behind it
        before = jvm_cpu(jvm)["cpu_s"]
        time.sleep(seconds)
        idle = jvm_cpu(jvm)["cpu_s"] - before
        activity = iter(Activity(seed=count))
        before, start = jvm_cpu(jvm)["cpu_s"], time.monotonic()
        sent = 0
        while (elapsed := time.monotonic() - start) < seconds:
            due = int(elapsed * rate) - sent
            if due > 0:
                log.append_batch([next(activity) for _ in range(due)])
                sent += due
            time.sleep(0.01)
        loaded = jvm_cpu(jvm)["cpu_s"] - before
        system.wait_until_caught_up(timeout=120)
    figures = {"realtime_pipelines": count, "idle_cpu_s": round(idle, 2),
               "loaded_cpu_s": round(loaded, 2), "events": sent,
               "idle_cores": round(idle / seconds, 3),
               "loaded_cores": round(loaded / seconds, 3)}  # fmt: skip
    print(
        f"{count} in Real-Time Mode: driver JVM {figures['idle_cores']} cores idle, "
        f"{figures['loaded_cores']} at {rate} events/s",
        flush=True,
    )
    return figures


def run(quick: bool = False, seconds: float = 30, rate: int = 100,
        counts: list[int] | None = None) -> Report:  # fmt: skip
    if quick:
        seconds, counts = 3, [0, 3]
    moment = Moment()
    runs = [measure(n, seconds, rate) for n in counts or COUNTS]
    figures = {"seconds": seconds, "rate": rate, "runs": runs}
    save("realtime", figures, moment)
    base = runs[0]
    rows = [
        Row(
            figure=f"driver JVM CPU, the board with {r['realtime_pipelines']} of its 3 pipelines "
            f"in Real-Time Mode: idle / at {rate} events/s (cores)",
            measured=f"{r['idle_cores']:.3f} / {r['loaded_cores']:.3f}",
            baseline=f"{base['realtime_pipelines']} in the mode: {base['idle_cores']:.3f} / "
            f"{base['loaded_cores']:.3f}",
        )
        for r in runs[1:]
    ]
    return Report("realtime", "Queries in Real-Time Mode: their CPU", "python -m bench.realtime",
                  figures, rows, moment=moment.finish())  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.realtime",
                                     description=__doc__.split("\n\n")[0])  # fmt: skip
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--rate", type=int, default=100)
    parser.add_argument("--counts", default=",".join(map(str, COUNTS)))
    args = parser.parse_args()
    run(args.quick, args.seconds, args.rate, [int(c) for c in args.counts.split(",") if c])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
