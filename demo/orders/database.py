"""The shop's SQL: the only place the demo reads or writes its PostgreSQL database.

Plain ``INSERT``, ``UPDATE`` and ``DELETE`` statements, as any application already writes them:
nothing here knows about the log or the views.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from demo.orders.activity import Change, Order, seed_changes

SCHEMA = Path(__file__).with_name("schema.sql")


SCHEMA_LOCK = 0x5E0B5
"""An advisory lock's key: two processes creating the table at once (``make run`` starts the
writer beside ``--schema``) take turns, since PostgreSQL's ``IF NOT EXISTS`` does not."""


def create_schema(conn: Any) -> None:
    """Create the shop's table, unless it exists."""
    with conn.cursor() as cur:
        cur.execute("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_LOCK,))
        cur.execute(SCHEMA.read_text())
    conn.commit()


def current_rows(conn: Any) -> dict[int, Order]:
    """The table's orders, by id, as the views show them."""
    with conn.cursor() as cur:
        cur.execute("SELECT id, customer, status, total::text FROM orders ORDER BY id")
        rows = cur.fetchall()
    conn.commit()  # a read-only transaction: end it, so it holds no snapshot meanwhile
    return {r[0]: {"id": r[0], "customer": r[1], "status": r[2], "total": r[3]} for r in rows}


def execute(cur: Any, change: Change) -> int:
    """Run one change's statement in the open transaction; returns the order's id."""
    if change.op == "insert":
        cur.execute(
            "INSERT INTO orders (customer, status, total) VALUES (%s, %s, %s) RETURNING id",
            (change.customer, change.status, change.total),
        )
        return int(cur.fetchone()[0])
    if change.op == "update":
        cur.execute(
            "UPDATE orders SET customer = %s, status = %s, total = %s WHERE id = %s",
            (change.customer, change.status, change.total, change.id),
        )
    elif change.op == "delete":
        cur.execute("DELETE FROM orders WHERE id = %s", (change.id,))
    else:
        raise ValueError(f"unknown change {change.op!r}: insert, update or delete")
    assert change.id is not None
    return change.id


def seed_if_empty(conn: Any) -> bool:
    """Insert the seed orders, in one transaction, into a table that never had any."""
    with conn.cursor() as cur:
        # The sequence, not the rows: a shop whose orders were all archived is not new.
        cur.execute("SELECT is_called FROM orders_id_seq")
        if cur.fetchone()[0]:
            conn.commit()
            return False
        for change in seed_changes():
            execute(cur, change)
    conn.commit()
    return True
