"""The application's streaming query on the test run's SparkSession, as the ``pipeline`` fixture
and the browser tests run it."""

from __future__ import annotations

import time
from typing import Any

import redis

from streaming.core.settings import Settings


class RunningPipeline:
    """The application's streaming query, running on the session's SparkSession."""

    def __init__(self, spark: Any, settings: Settings) -> None:
        from demo.chirp import app
        from streaming.job.versioning import start

        self.settings = settings
        self.queries = start(spark, app, settings)

    def wait_until_caught_up(self, client: redis.Redis, timeout: float = 60.0) -> None:
        """Block until the views reflect every event in the log."""
        from streaming.core.log import views_caught_up

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for query in self.queries:
                if query.exception() is not None:
                    raise AssertionError(f"pipeline {query.name} failed: {query.exception()}")
            if views_caught_up(client, self.settings.log_partitions):
                return
            time.sleep(0.05)
        raise AssertionError(f"pipeline did not catch up within {timeout} s")

    def stop(self) -> None:
        for query in self.queries:
            query.stop()
