"""``python -m deploy.spark``: a Spark standalone cluster on this machine until stopped."""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from deploy.spark import ClusterError, StandaloneCluster
from liveviews import console

STOP_UNDER_A_RUNNER_S = 3.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m deploy.spark",
        description="Start a Spark standalone master and workers; stop them on Ctrl-C or SIGTERM.",
    )
    parser.add_argument("--workers", type=int, default=2, help="how many workers (default 2)")
    parser.add_argument("--cores", type=int, default=1, help="cores each worker offers")
    parser.add_argument("--memory", default="1g",
                        help="memory each worker offers (1g): at least spark.executor.memory "
                        "(1g unless the pipeline sets it), or no executor fits")  # fmt: skip
    parser.add_argument("--port", type=int, default=None,
                        help="the master's port (a free one by default)")  # fmt: skip
    parser.add_argument("--ui-port", type=int, default=None,
                        help="the master's status page's port (a free one by default)")  # fmt: skip
    parser.add_argument("--dir", type=Path, default=None,
                        help="where the processes keep logs and work files (a temporary "
                        "directory by default)")  # fmt: skip
    args = parser.parse_args(argv)
    if args.workers < 1 or args.cores < 1:
        parser.error("--workers and --cores must be at least 1")
    root = args.dir or Path(tempfile.mkdtemp(prefix="lv-spark-cluster-"))
    stop = console.stop_requested()
    try:
        with StandaloneCluster(root, port=args.port, ui_port=args.ui_port) as cluster:
            for _ in range(args.workers):
                cluster.add_worker(args.cores, args.memory)
            cluster.wait_for_workers(args.workers)
            print(f"Spark master {cluster.master_url} with {args.workers} workers; "
                  f"status at {cluster.ui_url}; logs in {root}", flush=True)  # fmt: skip
            print(f"Run the pipeline on it: SPARK_MASTER={cluster.master_url} "
                  "python -m liveviews.pipeline",
                  flush=True)  # fmt: skip
            stop.wait()
            print("Stopping the cluster.", flush=True)
            # Within the 5 s a Procfile runner (honcho) waits before it kills this process's
            # group: the workers lead groups of their own, which only this process stops.
            cluster.stop(timeout=STOP_UNDER_A_RUNNER_S)
    except ClusterError as exc:
        print(f"deploy.spark: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
