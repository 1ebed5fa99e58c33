"""Shared fixtures: one real Redis-compatible server, one PostgreSQL server and one local
SparkSession per run.

``--redis-url`` runs the suite against a server you started; by default an embedded one is
started on a free port in a temporary directory. Every test gets it flushed.
``--postgres-url`` does the same for PostgreSQL (its user must be allowed to create databases
and replication slots); each test that asks for ``database`` gets a fresh database on it.
"""

from __future__ import annotations

import os
import secrets
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg2
import psycopg2.extensions
import pytest
import redis

from liveviews.cdc.embedded import EmbeddedPostgres
from liveviews.pipeline.settings import Settings
from liveviews.store.embedded import EmbeddedStore, free_port
from tests.support.astlock import parse_one_at_a_time
from tests.support.installed import spark_venv, wheel  # noqa: F401  (fixtures: built once a run)
from tests.support.leftovers import left_behind, mark_run
from tests.support.pipeline import RunningPipeline

parse_one_at_a_time()  # gateways in threads of this process format tracebacks


def pytest_configure(config: pytest.Config) -> None:
    mark_run()  # before any test starts a process, so that every one inherits it
    # The demos declare views in Real-Time Mode, whose queries hold task slots for as long as
    # they run and move their frontier once per epoch. The suite runs every pipeline in
    # micro-batches unless a test asks for the mode (tests/streaming/realtime, the pipeline kill
    # test, ``make run``'s tests); ``LV_REALTIME=on make test`` runs all of it in the mode.
    os.environ.setdefault("LV_REALTIME", "off")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail a run that leaves a process it started running (liveviews' tests.support.leftovers)."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return
    left = left_behind()
    if left:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        lines = ["processes this run started were still running at its end (killed now):", *left]
        if reporter is not None:
            reporter.write_line("\n".join(lines), red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--redis-url", default=None, help="use this server instead of an embedded one")
    parser.addoption(
        "--postgres-url", default=None, help="use this PostgreSQL instead of an embedded one"
    )


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


@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One Kafka node (Apache Kafka's jars, KRaft) for the run: its bootstrap servers."""
    from liveviews.log.kafka.broker import KafkaCluster

    with KafkaCluster(tmp_path_factory.mktemp("kafka")) as bootstrap:
        yield bootstrap


@pytest.fixture(scope="session")
def postgres_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """A PostgreSQL server with ``wal_level=logical``: the embedded one, in a directory of its
    own under /tmp, which the ``postgres`` user can reach when the tests run as root."""
    url = request.config.getoption("--postgres-url")
    if url:
        yield url
        return
    root = Path(tempfile.mkdtemp(prefix="lv-pg-"))
    root.chmod(0o711)
    try:
        with EmbeddedPostgres(root, free_port(), {"fsync": "off"}) as started:
            yield started
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture()
def database(postgres_url: str) -> Iterator[str]:
    """A fresh database on the test server; dropped after the test, with its slots."""
    name = f"t_{secrets.token_hex(6)}"
    admin = psycopg2.connect(postgres_url)
    admin.autocommit = True
    with admin.cursor() as cur:
        cur.execute(f"CREATE DATABASE {name}")
    yield psycopg2.extensions.make_dsn(postgres_url, dbname=name)
    with admin.cursor() as cur:
        deadline = time.monotonic() + 10
        while True:  # a slot is dropped once its last reader has gone
            cur.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
                (name,),
            )
            cur.execute(
                "SELECT slot_name, active FROM pg_replication_slots WHERE database = %s", (name,)
            )
            slots = cur.fetchall()
            for slot, active in slots:
                if not active:
                    cur.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
            if not slots or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        cur.execute(f"DROP DATABASE {name} WITH (FORCE)")
    admin.close()


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
            "LV_REALTIME": os.environ["LV_REALTIME"],
        }
    )


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """The run's one SparkSession, in local mode."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from liveviews.pipeline.session import build_session

    session = build_session(
        Settings.from_env({"LV_DATA_DIR": tempfile.mkdtemp(prefix="lv-spark-")})
    )
    yield session
    session.stop()
    # stop() leaves the JVM PySpark launched running until this process exits: ended here, it
    # is not taken for a process the run left behind (tests.support.leftovers).
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    proc = getattr(gateway, "proc", None)
    if gateway is not None:
        gateway.shutdown()
        SparkContext._gateway = None
        SparkContext._jvm = None
    if proc is not None:
        proc.terminate()
        proc.wait(30)


@pytest.fixture()
def pipeline(spark: Any, settings: Settings, store: redis.Redis) -> Iterator[RunningPipeline]:
    """A fresh query (new checkpoint) over a flushed store, stopped after the test."""
    running = RunningPipeline(spark, settings)
    yield running
    running.stop()
