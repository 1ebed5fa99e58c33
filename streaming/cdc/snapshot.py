"""The initial snapshot: the declared tables' rows as of the slot's start, as insert events.

Made right after the slot, from the snapshot it exported, in one ``REPEATABLE READ``
transaction: every change after it comes through the slot, and none before it does. Its events
are one source transaction (so they become visible in the views together) and are appended in
one MULTI with the slot's start position (``position.append_at``): a crash before that step
leaves nothing in the log, and the next start drops the slot and takes the snapshot again.
The limit is that step's size: every row of every declared table is held in this process's
memory and in one store transaction.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import psycopg2

from liveviews.app import App
from liveviews.cdc.catalog import Columns
from liveviews.cdc.pgoutput import Tuple
from liveviews.cdc.rows import Follow
from liveviews.log.events import Event, Transaction
from liveviews.tables import Table


def read_snapshot(
    url: str,
    snapshot: str,
    tables: Sequence[Table],
    columns: dict[str, Columns],
    app: App,
    time_ms: int,
    tx_id: str,
) -> list[Event]:
    """Every row of ``tables`` as of the exported ``snapshot``, as ``<table>_insert`` events."""
    events: list[Event] = []
    conn = psycopg2.connect(url)
    try:
        conn.set_session(isolation_level="REPEATABLE READ", readonly=True)
        with conn.cursor() as cur:
            cur.execute("SET TRANSACTION SNAPSHOT %s", (snapshot,))
            for table in tables:
                declared = [(n, oid) for n, oid in columns[table.name] if n in table.columns]
                follow = Follow.match(table, declared)
                listed = ", ".join(f"{name}::text" for name, _ in declared)
                order = ", ".join(table.key)
                cur.execute(f"SELECT {listed} FROM {table.qualified} ORDER BY {order}")
                for record in cur:
                    values: Tuple = tuple(("n", None) if v is None else ("t", v) for v in record)
                    events.append(follow.event(app, "insert", follow.row(values), time_ms))
        conn.rollback()
    finally:
        conn.close()
    tx = Transaction(tx_id, len(events))
    return [dataclasses.replace(e, tx=tx) for e in events]
