"""``python -m deploy.spark.ready``: wait until a standalone master counts enough live workers.

A driver that starts before its master is up spends Spark's registration retries (20 s apart)
and may give up; ``make run-cluster`` starts the pipeline after this returns instead.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.error
import urllib.request


def alive_workers(ui_url: str) -> int:
    with urllib.request.urlopen(f"{ui_url}/json/", timeout=2) as resp:
        status = json.load(resp)
    return sum(1 for w in status.get("workers", []) if w.get("state") == "ALIVE")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m deploy.spark.ready", description=__doc__)
    parser.add_argument("--ui", required=True, help="the master's status page, http://host:port")
    parser.add_argument("--workers", type=int, default=1, help="live workers to wait for")
    parser.add_argument("--timeout", type=float, default=180, help="seconds before giving up")
    args = parser.parse_args(argv)
    deadline = time.monotonic() + args.timeout
    while time.monotonic() < deadline:
        try:
            if alive_workers(args.ui) >= args.workers:
                return 0
        except (OSError, ValueError):
            pass  # not up yet
        time.sleep(0.5)
    print(f"deploy.spark.ready: the Spark master at {args.ui} did not count {args.workers} live "
          f"workers within {args.timeout:.0f} s; see its log.", file=sys.stderr)  # fmt: skip
    return 1


if __name__ == "__main__":
    sys.exit(main())
