"""Exactly once across crashes: SIGKILL the CDC process at random points while a writer runs
random transactions on two tables, and crash PostgreSQL once (an immediate shutdown) and the
store once (SIGKILL) meanwhile. At the end the tables recomputed from the log equal the tables,
and every transaction is in the log exactly once (its events counted by their ``tx`` equal the
``tx_events`` it announced).

A PostgreSQL and a store of this test's own are restarted; the CDC process is started again at
once whenever it is not running, as its supervisor would. ``LV_CDC_KILLS`` kills (default 5),
``LV_CDC_SEED`` for the random points.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg2
import pytest
import redis

from liveviews.cdc.embedded import EmbeddedPostgres
from liveviews.store.embedded import EmbeddedStore, free_port
from tests.cdc import shop
from tests.cdc.harness import (
    CdcProcess,
    execute,
    kafka_logged,
    logged,
    recompute,
    table_rows,
    wait_for,
)

KILLS = int(os.environ.get("LV_CDC_KILLS") or 5)
SEED = int(os.environ.get("LV_CDC_SEED") or random.randrange(1 << 30))
ORDERS = 60
"""Order ids the writer picks from: small, so updates and deletes meet rows often."""
NEEDS_A_PERSON = 2


class Writer(threading.Thread):
    """Random transactions of 1 to 4 row changes over orders and items, until halted; rides
    out a restart of the database by connecting again. No change moves a row to another
    partition (its key or its ``partition_by`` column), so each row's events stay in order."""

    def __init__(self, dsn: str, seed: int) -> None:
        super().__init__(daemon=True)
        self.dsn = dsn
        self.rng = random.Random(seed)
        self.halt = threading.Event()
        self.committed = 0
        self.failed = 0

    def statement(self) -> tuple[str, tuple[object, ...]]:
        r, order = self.rng, self.rng.randrange(ORDERS)
        line = r.randrange(4)
        return r.choice([
            ("INSERT INTO orders VALUES (%s, %s, 'new', %s, NULL) ON CONFLICT DO NOTHING",
             (order, f"c{order % 7}", r.randrange(10_000) / 100)),
            ("UPDATE orders SET status = %s, total = %s WHERE id = %s",
             (r.choice(["paid", "sent", "done"]), r.randrange(10_000) / 100, order)),
            ("UPDATE orders SET note = %s WHERE id = %s", (str(r.random()), order)),
            ("DELETE FROM orders WHERE id = %s", (order,)),
            ("INSERT INTO items VALUES (%s, %s, 'tea', 1) ON CONFLICT DO NOTHING", (order, line)),
            ("UPDATE items SET qty = qty + 1 WHERE order_id = %s", (order,)),
            ("DELETE FROM items WHERE order_id = %s AND line = %s", (order, line)),
        ])  # fmt: skip

    def run(self) -> None:
        conn = None
        while not self.halt.is_set():
            try:
                if conn is None:
                    conn = psycopg2.connect(self.dsn, connect_timeout=2)
                with conn, conn.cursor() as cur:
                    for _ in range(self.rng.randint(1, 4)):
                        cur.execute(*self.statement())
                self.committed += 1
            except psycopg2.Error:
                self.failed += 1  # committed or not: the tables are the truth compared with
                conn = None
                time.sleep(0.2)
            time.sleep(0.005)
        if conn is not None:
            conn.close()


class Keeper(threading.Thread):
    """Starts the CDC process again whenever it is not running, as its supervisor would."""

    def __init__(self, cdc: CdcProcess) -> None:
        super().__init__(daemon=True)
        self.cdc = cdc
        self.halt = threading.Event()
        self.lock = threading.Lock()
        self.gave_up: str | None = None

    def run(self) -> None:
        while not self.halt.is_set():
            with self.lock:
                proc = self.cdc.proc
                if proc is not None and proc.poll() == NEEDS_A_PERSON:
                    self.gave_up = self.cdc.text()
                    return
                if not self.cdc.alive():
                    self.cdc.start()
            time.sleep(0.1)

    def kill(self) -> None:
        with self.lock:
            self.cdc.kill()


@pytest.fixture()
def servers() -> Iterator[tuple[EmbeddedPostgres, EmbeddedStore, Path]]:
    root = Path(tempfile.mkdtemp(prefix="lv-cdc-crash-"))
    root.chmod(0o711)
    postgres = EmbeddedPostgres(root / "pg", free_port(), {"fsync": "off"})
    store = EmbeddedStore(root / "store", free_port(), appendfsync="always")
    try:
        postgres.start()
        store.start()
        yield postgres, store, root
    finally:
        store.stop()
        postgres.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.parametrize("log", ["store", "kafka"])
def test_kills_and_restarts_lose_and_double_nothing(
    servers: tuple[EmbeddedPostgres, EmbeddedStore, Path], log: str, request: pytest.FixtureRequest
) -> None:
    """On Kafka (``LV_KAFKA``) a transaction's events and the capture's position are one Kafka
    transaction (``liveviews.cdc.kafka``); the store is then killed all the same."""
    postgres, store, root = servers
    rng = random.Random(SEED)
    dsn = postgres.url
    execute(dsn, shop.SCHEMA)
    execute(dsn, ("INSERT INTO orders SELECT i, 'c' || (i %% 7), 'new', i, NULL"
                  " FROM generate_series(0, %s) i", (ORDERS // 2,)))  # fmt: skip
    kafka: dict[str, str] = {}
    if log == "kafka":
        kafka = {"LV_KAFKA": request.getfixturevalue("kafka_bootstrap"),
                 "LV_KAFKA_TOPIC": f"cdc-{uuid.uuid4().hex[:8]}"}  # fmt: skip
    cdc = CdcProcess(store.url, dsn, root / "cdc", "tests.cdc.shop:app", **kafka)
    writer, keeper = Writer(dsn, SEED), Keeper(cdc)
    writer.start()
    keeper.start()
    try:
        for kill in range(KILLS):
            time.sleep(rng.uniform(0.05, 1.5))
            keeper.kill()
            if kill == KILLS // 3:
                # An immediate shutdown, as a crash: no checkpoint, so the slot comes back
                # confirmed where the last checkpoint saw it and sends transactions again.
                assert postgres.process is not None
                postgres.process.send_signal(signal.SIGQUIT)
                postgres.process.wait()
                postgres.process = None
                time.sleep(0.5)
                postgres.start()
            if kill == 2 * KILLS // 3:
                assert store.process is not None
                store.process.kill()
                store.process.wait()
                store.process = None
                time.sleep(0.5)
                store.start()
        time.sleep(1.0)
    finally:
        writer.halt.set()
        writer.join(30)
    client = redis.Redis.from_url(store.url)

    def logged_events() -> list[dict[str, Any]]:
        if kafka:
            return kafka_logged(kafka["LV_KAFKA"], kafka["LV_KAFKA_TOPIC"])
        return logged(client)

    try:

        def differences() -> dict[str, object]:
            assert keeper.gave_up is None, keeper.gave_up
            rebuilt = recompute(logged_events(), shop.app)
            out: dict[str, object] = {}
            for name, table in shop.app.tables.items():
                rows = table_rows(dsn, table)
                keys = set(rows) | set(rebuilt[name])
                out |= {f"{name}{k}": (rebuilt[name].get(k), rows.get(k)) for k in keys
                        if rebuilt[name].get(k) != rows.get(k)}  # fmt: skip
            return out

        try:
            wait_for(lambda: not differences(), 30, "the log to equal the tables")
        except AssertionError:
            raise AssertionError(
                f"seed {SEED}: (from the log, in the table): {differences()}\n{cdc.text()}"
            ) from None
        events = logged_events()
        announced = {e["tx"]: e["tx_events"] for e in events}
        counted: dict[str, int] = {}
        for e in events:
            counted[e["tx"]] = counted.get(e["tx"], 0) + 1
        doubled = {tx: n for tx, n in counted.items() if n != announced[tx]}
        assert not doubled, f"transactions appended more than once (seed {SEED}): {doubled}"
        assert writer.committed > 20 * KILLS // 5
        assert cdc.starts > KILLS  # each kill, and the restarts of the database and the store
    finally:
        keeper.halt.set()
        keeper.join(10)
        cdc.stop()
        client.close()
