"""The whole shop in one test run: PostgreSQL, change data capture, Spark, gateway.

A PostgreSQL of its own (``liveviews.cdc.embedded``) holds the shop's table; the CDC process
(``python -m liveviews.cdc``, a child process as ``make run`` starts it) follows it into the
run's store; the shop's pipeline runs on the run's SparkSession (``RunningPipeline``); a real
uvicorn gateway serves its views and demo/web. Every write goes to PostgreSQL with plain SQL.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg2
import redis

from demo.orders import app as shop
from demo.orders.database import create_schema, seed_if_empty
from liveviews.cdc.embedded import EmbeddedPostgres
from liveviews.log.events import log_stream
from liveviews.pipeline.settings import Settings
from liveviews.store.embedded import free_port
from tests.support.gateway import ServedGateway
from tests.support.gateway_settings import PARTITIONS, SHARDS, settings_for
from tests.support.pipeline import RunningPipeline

ROOT = Path(__file__).resolve().parents[2]


class OrdersSystem:
    """PostgreSQL, CDC, pipeline and gateway over ``store_url``; ``stop()`` ends them all."""

    def __init__(self, store_url: str, spark: Any) -> None:
        self.client = redis.Redis.from_url(store_url)
        self.client.flushdb()
        # Not under pytest's own temporary directory: that one is its owner's only, and a root
        # test run starts PostgreSQL as the 'postgres' user, who must reach its data.
        self.dir = Path(tempfile.mkdtemp(prefix="lv-shop-"))
        self.dir.chmod(0o711)
        self.postgres = EmbeddedPostgres(self.dir, free_port())
        self.cdc: subprocess.Popen[bytes] | None = None
        self.pipeline: RunningPipeline | None = None
        self.gateway: ServedGateway | None = None
        self.env = {
            **os.environ,
            "REDIS_URL": store_url,
            "LV_APP": "demo.orders:app",
            "LV_DATA_DIR": str(self.dir / "data"),
            "LV_CHECKPOINT_DIR": str(self.dir / "checkpoints"),
            "LV_LOG_PARTITIONS": str(PARTITIONS),
            "LV_CHANGE_SHARDS": str(SHARDS),
            "LV_SHUFFLE_PARTITIONS": "2",
        }
        self.url = ""
        self.spark = spark

    def start(self) -> OrdersSystem:
        """PostgreSQL with the seeded table, then CDC, pipeline and gateway, once the views
        hold the seed orders."""
        self.env["DATABASE_URL"] = self.database_url = self.postgres.start()
        conn = self.connect()
        try:
            create_schema(conn)
            seed_if_empty(conn)
        finally:
            conn.close()
        log = open(self.dir / "cdc.log", "ab")  # noqa: SIM115 - the child owns it
        self.cdc = subprocess.Popen([sys.executable, "-m", "liveviews.cdc"], cwd=ROOT,
                                    env=self.env, stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
        settings = Settings.from_env(self.env)
        self.pipeline = RunningPipeline(self.spark, settings, shop)
        self.gateway = ServedGateway(settings_for(self.env["REDIS_URL"], LV_APP="demo.orders:app",
                                                  LV_HEARTBEAT_SECONDS="5")).start()  # fmt: skip
        self.url = self.gateway.url
        self.wait_for_log(8)
        self.pipeline.wait_until_caught_up(self.client, timeout=120)
        return self

    def connect(self) -> Any:
        return psycopg2.connect(self.database_url)

    def sql(self, statement: str, *args: Any) -> Any:
        """Run one statement in a transaction of its own, committed; its first row, if any."""
        conn = self.connect()
        try:
            with conn, conn.cursor() as cur:  # commits when the block ends without an error
                cur.execute(statement, args)
                return cur.fetchone() if cur.description else None
        finally:
            conn.close()

    def wait_for_log(self, events: int, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while sum(self.client.xlen(log_stream(p)) for p in range(PARTITIONS)) < events:
            assert self.cdc is not None
            if self.cdc.poll() is not None or time.monotonic() > deadline:
                log = (self.dir / "cdc.log").read_text()[-3000:]
                raise AssertionError(f"the CDC process appended too few events: {log}")
            time.sleep(0.05)

    def stop(self) -> None:
        if self.gateway is not None:
            self.gateway.stop()
        if self.pipeline is not None:
            self.pipeline.stop()
        if self.cdc is not None:
            self.cdc.terminate()
            try:
                self.cdc.wait(20)
            except subprocess.TimeoutExpired:
                self.cdc.kill()
                self.cdc.wait()
        self.postgres.stop()
        self.client.close()
        shutil.rmtree(self.dir, ignore_errors=True)
