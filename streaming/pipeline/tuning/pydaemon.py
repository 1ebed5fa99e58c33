"""The pipeline's Python worker daemon: PySpark's own, with what a worker imports frozen.

Spark starts Python workers by forking them from a daemon (``spark.python.daemon.module``),
and keeps each worker for task after task. Between two tasks PySpark's daemon runs a full
garbage collection (``gc.collect()``) in the worker. A worker that has run one task holds
~75k objects it will keep for life: PySpark, pyarrow, pandas, the views' modules. Collecting
walks all of them each time: ~50-80 ms per task on the reference machine, a quarter of a
worker's time at 100 events/s, on the cores the JVM's micro-batches need (docs/PERFORMANCE.md).

Here each worker, after its first task, collects once and then freezes what survived
(``gc.freeze``): the collections after each later task walk only the objects made since. Cyclic
garbage made by later tasks is still collected after each of them, as before; reference
counting frees the rest.

Spark runs it as ``python -m liveviews.pipeline.tuning.pydaemon <worker module>``, as it would
PySpark's.
"""

from __future__ import annotations

import gc
from typing import Any

from pyspark import daemon

_run_task = daemon.worker


def _worker(sock: Any, authenticated: bool) -> int:
    """One task in a forked worker (PySpark's ``daemon.worker``), then the first time in this
    process: collect, and keep what survived out of later collections."""
    code: int = _run_task(sock, authenticated)
    if not gc.get_freeze_count():
        gc.collect()
        gc.freeze()
    return code


if __name__ == "__main__":
    daemon.worker = _worker
    daemon.manager()
