"""The snapshot and the stream, against a real PostgreSQL and store: rows that existed before
the slot, then transactions of inserts, updates and deletes over two tables, appear as the
right events, each transaction's with its commit position and size, in commit order."""

from __future__ import annotations

from pathlib import Path

import psycopg2
import pytest
import redis

from liveviews.cdc.position import position_key
from tests.cdc import shop
from tests.cdc.harness import (
    CdcProcess,
    execute,
    logged,
    recompute,
    table_rows,
    tx_counts,
    wait_for,
)

APP = "tests.cdc.shop:app"


@pytest.fixture()
def cdc(store: redis.Redis, store_url: str, database: str, tmp_path: Path) -> CdcProcess:
    execute(database, shop.SCHEMA)
    return CdcProcess(store_url, database, tmp_path, APP)


def caught_up(store: redis.Redis, database: str) -> bool:
    events = logged(store)
    return all(
        recompute(events, shop.app)[name] == table_rows(database, table)
        for name, table in shop.app.tables.items()
    )


def test_snapshot_then_transactions_in_commit_order(
    cdc: CdcProcess, store: redis.Redis, database: str
) -> None:
    execute(
        database,
        "INSERT INTO orders VALUES (1, 'ann', 'new', 12.50, 'x'), (2, 'bob', 'new', NULL, NULL)",
        "INSERT INTO items VALUES (1, 1, 'tea', 2), (1, 2, 'cup', 1)",
    )
    cdc.start()
    try:
        wait_for(lambda: len(logged(store)) == 4, 30, "the snapshot")
        snapshot = logged(store)
        assert {e["type"] for e in snapshot} == {"orders_insert", "items_insert"}
        assert len({e["tx"] for e in snapshot}) == 1 and snapshot[0]["tx"].startswith("snapshot ")
        assert {e["tx_events"] for e in snapshot} == {4}
        ann = next(e for e in snapshot if e["key"] == "ann")
        assert ann["payload"] == {"id": 1, "customer": "ann", "status": "new", "total": "12.50"}
        bob = next(e for e in snapshot if e["key"] == "bob")
        assert bob["payload"]["total"] is None  # SQL NULL; the undeclared 'note' is left out
        assert {e["key"] for e in snapshot if e["type"] == "items_insert"} == {"1:1", "1:2"}

        execute(
            database,
            "UPDATE orders SET status = 'paid', total = 13.00 WHERE id = 1",
            "INSERT INTO items VALUES (2, 1, 'pot', 1)",
            "DELETE FROM items WHERE order_id = 1 AND line = 2",
        )
        execute(database, "UPDATE items SET line = 3 WHERE order_id = 2 AND line = 1")
        execute(database, "DELETE FROM orders WHERE id = 2", "UPDATE orders SET note = 'y'")
        wait_for(lambda: caught_up(store, database), 30, "the log to equal the tables")
        events = logged(store)
        streamed = [e for e in events if not e["tx"].startswith("snapshot ")]
        counts = tx_counts(streamed)
        assert sorted(counts.values()) == [1, 2, 3]  # one event per row change, per transaction
        assert all(e["tx_events"] == counts[e["tx"]] for e in streamed)

        first = [e for e in streamed if counts[e["tx"]] == 3]
        update = next(e for e in first if e["type"] == "orders_update")
        assert update["key"] == "ann"
        assert update["payload"] == {"id": 1, "customer": "ann", "status": "paid",
                                     "total": "13.00", "old_key": {"id": 1}}  # fmt: skip
        delete = next(e for e in first if e["type"] == "items_delete")
        assert delete["payload"] == {"old_key": {"order_id": 1, "line": 2}}
        assert delete["key"] == "1:2"
        moved = next(e for e in streamed if counts[e["tx"]] == 1)
        assert moved["payload"]["old_key"] == {"order_id": 2, "line": 1}
        assert moved["key"] == "2:3"
        # A delete partitioned by a column that is not the key carries it from the old row.
        gone = next(e for e in streamed if e["type"] == "orders_delete")
        assert gone["payload"] == {"old_key": {"id": 2}, "customer": "bob"}
        assert gone["key"] == "bob"
        # An update of an undeclared column is a row change like another: its event says so.
        assert sum(e["type"] == "orders_update" for e in streamed) == 2

        # Commit order: within a partition, the transactions' positions only grow.
        for p in range(4):
            positions = [e["tx"] for e in streamed if e["partition"] == p]
            lsns = [tuple(int(x, 16) for x in tx.split("/")) for tx in positions]
            assert lsns == sorted(lsns)
        assert store.hget(position_key("liveviews"), "tables") == b"public.items,public.orders"
    finally:
        assert cdc.stop() == 0, cdc.text()
    assert "stopped, as asked" in cdc.text()


def test_transactions_of_undeclared_tables_move_the_slot_on(
    cdc: CdcProcess, store: redis.Redis, database: str
) -> None:
    """Else the database keeps its WAL for the slot forever."""
    execute(database, "CREATE TABLE other (x int)")
    cdc.start()
    try:
        wait_for(lambda: store.exists(position_key("liveviews")) == 1, 30, "the snapshot")
        for i in range(20):
            execute(database, f"INSERT INTO other VALUES ({i})")
        conn = psycopg2.connect(database)
        conn.autocommit = True
        with conn, conn.cursor() as cur:
            cur.execute("SELECT pg_current_wal_lsn()")
            (written,) = cur.fetchone()

            def confirmed() -> bool:
                cur.execute("SELECT confirmed_flush_lsn >= %s::pg_lsn FROM pg_replication_slots"
                            " WHERE slot_name = 'liveviews'", (written,))  # fmt: skip
                return bool(cur.fetchone()[0])

            wait_for(confirmed, 10, "the slot to be confirmed past the other table's changes")
        conn.close()
        assert logged(store) == []
    finally:
        assert cdc.stop() == 0, cdc.text()
