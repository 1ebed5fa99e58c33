"""Shared fixtures: one real Redis-compatible server and one local SparkSession per run.

``--redis-url`` runs the suite against a server you started; by default an embedded one is
started on a free port in a temporary directory. Every test gets it flushed.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from streaming.core.embedded import EmbeddedStore, free_port
from streaming.core.settings import Settings
from tests.support.pipeline import RunningPipeline


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--redis-url", default=None, help="use this server instead of an embedded one")


@pytest.fixture(scope="session")
def store_url(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    url = request.config.getoption("--redis-url")
    if url:
        yield url
        return
    store = EmbeddedStore(tmp_path_factory.mktemp("store"), free_port())
    with store as started:
        yield started


@pytest.fixture()
def store(store_url: str) -> Iterator[redis.Redis]:
    """A client of the test server, flushed before the test."""
    client = redis.Redis.from_url(store_url)
    client.flushdb()
    yield client
    client.close()


@pytest.fixture()
def settings(store_url: str, tmp_path: Path) -> Settings:
    return Settings.from_env(
        {
            "REDIS_URL": store_url,
            "LV_DATA_DIR": str(tmp_path / "data"),
            "LV_CHECKPOINT_DIR": str(tmp_path / "checkpoints"),
            "LV_LOG_PARTITIONS": "4",
            "LV_CHANGE_SHARDS": "8",
            "LV_SHUFFLE_PARTITIONS": "2",
        }
    )


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """The run's one SparkSession, in local mode."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from streaming.job.session import build_session

    session = build_session(
        Settings.from_env({"LV_DATA_DIR": tempfile.mkdtemp(prefix="lv-spark-")})
    )
    yield session
    session.stop()


@pytest.fixture()
def pipeline(spark: Any, settings: Settings, store: redis.Redis) -> Iterator[RunningPipeline]:
    """A fresh query (new checkpoint) over a flushed store, stopped after the test."""
    running = RunningPipeline(spark, settings)
    yield running
    running.stop()
