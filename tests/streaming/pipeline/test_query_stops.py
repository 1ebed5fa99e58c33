"""A query that failed is never taken for Spark shutting down.

The pipeline's loop ends quietly (exit 0, final under ``liveviews.supervise``) when its queries
stop without failing. A query that fails between the loop's recovery check and that test was
once taken for such a stop: with its checkpoint disk full, the pipeline exited 0 and was not
started again, and the views stayed behind for good.
"""

from __future__ import annotations

import time
from typing import Any

from liveviews.pipeline.recovery import stopped_without_failing


def _query(spark: Any, name: str, tmp_path: Any, fail: bool) -> Any:
    def write(batch: Any, batch_id: int) -> None:
        if fail:
            raise OSError("No space left on device")

    return (
        spark.readStream.format("rate").option("rowsPerSecond", 1).load()
        .writeStream.queryName(name).foreachBatch(write)
        .option("checkpointLocation", str(tmp_path / name))
        .trigger(processingTime="100 milliseconds").start()
    )  # fmt: skip


def _until_inactive(query: Any) -> None:
    deadline = time.monotonic() + 60
    while query.isActive:
        assert time.monotonic() < deadline, f"{query.name} still running"
        time.sleep(0.05)


def test_stopped_queries_and_failed_ones_are_told_apart(spark: Any, tmp_path: Any) -> None:
    running = _query(spark, "lv_test_running", tmp_path, fail=False)
    stopped = _query(spark, "lv_test_stopped", tmp_path, fail=False)
    failed = _query(spark, "lv_test_failed", tmp_path, fail=True)
    try:
        assert not stopped_without_failing({"a": running, "b": stopped})
        stopped.stop()
        assert stopped_without_failing({"a": running, "b": stopped})
        _until_inactive(failed)
        assert failed.exception() is not None
        assert not stopped_without_failing({"a": running, "c": failed})
        assert not stopped_without_failing({"b": stopped, "c": failed})
    finally:
        for q in (running, stopped, failed):
            q.stop()
