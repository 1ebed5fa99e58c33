"""An application's streaming queries on the test run's SparkSession, as the ``pipeline`` fixture
and the browser tests run them."""

from __future__ import annotations

import time
from typing import Any

import redis

from liveviews.app import App
from liveviews.pipeline.settings import Settings


class RunningPipeline:
    """An application's streaming queries (Chirp's by default), running on the session's
    SparkSession."""

    def __init__(self, spark: Any, settings: Settings, app: App | None = None) -> None:
        from demo.chirp import app as chirp
        from liveviews.pipeline.versioning import start_versions

        self.settings = settings
        self.versioning = start_versions(spark, app or chirp, settings)

    @property
    def queries(self) -> list[Any]:
        """The queries running now: a rebuild adds one, a switch removes the replaced one."""
        return list(self.versioning.queries.values())

    def rebuild(self, client: redis.Redis, pipeline: str, timeout: float = 120.0) -> None:
        """Build ``pipeline`` again beside the serving version, as ``liveviews rebuild`` asks,
        and return once readers are switched to the new version."""
        from liveviews.pipeline import versions

        before = versions.read(client, pipeline)
        versions.ask(client, pipeline, "rebuild")
        deadline = time.monotonic() + timeout
        while (now := versions.read(client, pipeline)) == before or (
            now is not None and now.active == (before.active if before else None)
        ):
            self.versioning.tick()
            if time.monotonic() > deadline:
                raise AssertionError(f"{pipeline} was not rebuilt within {timeout} s")
            time.sleep(0.05)

    def wait_until_caught_up(self, client: redis.Redis, timeout: float = 60.0) -> None:
        """Block until the views reflect every event in the log."""
        from liveviews.log.eventlog import views_caught_up

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.assert_running()
            if views_caught_up(client, self.settings.log_partitions):
                return
            time.sleep(0.05)
        raise AssertionError(f"pipeline did not catch up within {timeout} s")

    def assert_running(self) -> None:
        """Fail at once, with Spark's reason, if a query has stopped on an error."""
        for query in self.queries:
            if query.exception() is not None:
                raise AssertionError(f"pipeline {query.name} failed: {query.exception()}")

    def stop(self) -> None:
        for query in self.queries:
            query.stop()
