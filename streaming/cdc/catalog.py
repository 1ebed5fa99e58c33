"""What the database must offer before anything is captured: the declared tables with their
columns and primary keys, old rows where a delete needs them, and the publication.

Each check that fails stops the start with a sentence saying what to change, before a slot is
made or an event appended.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from liveviews.cdc.errors import SourceChanged
from liveviews.cdc.rows import Follow
from liveviews.tables import Table

Columns = list[tuple[str, int]]
"""A table's columns in row order: (name, type oid)."""


def columns_of(cur: Any, table: Table) -> Columns:
    cur.execute(
        "SELECT a.attname, a.atttypid FROM pg_attribute a"
        " JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = %s AND c.relname = %s AND a.attnum > 0 AND NOT a.attisdropped"
        " ORDER BY a.attnum",
        (table.schema, table.name),
    )
    return [(name, int(oid)) for name, oid in cur.fetchall()]


def check_table(cur: Any, table: Table) -> Columns:
    """The table's columns, once its declaration is found to match the database."""
    columns = columns_of(cur, table)
    if not columns:
        raise SourceChanged(
            f"the database has no table {table.qualified}: create it, or fix the name in the "
            "table's declaration (a schema other than public is written 'sales.orders')."
        )
    Follow.match(table, columns)
    cur.execute(
        "SELECT a.attname FROM pg_index i JOIN pg_attribute a"
        " ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)"
        " WHERE i.indrelid = %s::regclass AND i.indisprimary",
        (table.qualified,),
    )
    primary = sorted(name for (name,) in cur.fetchall())
    if primary != sorted(table.key):
        have = ", ".join(primary) if primary else "no primary key"
        raise SourceChanged(
            f"{table.qualified} has {have}, but its declaration says key={table.key}: declare "
            "the table's primary-key columns as its key (or give the table that primary key)."
        )
    if table.needs_old_row:
        cur.execute(
            "SELECT relreplident FROM pg_class WHERE oid = %s::regclass", (table.qualified,)
        )
        if cur.fetchone()[0] != "f":
            raise SourceChanged(
                f"{table.qualified} is partitioned by {table.partition_by!r}, which is not a key "
                "column, so a delete needs the old row whole: run ALTER TABLE "
                f"{table.qualified} REPLICA IDENTITY FULL, then start the CDC process again."
            )
    return columns


def ensure_publication(cur: Any, publication: str, tables: Iterable[Table]) -> None:
    """Create the publication of the declared tables, or add those it lacks."""
    names = sorted(t.qualified for t in tables)
    cur.execute("SELECT 1 FROM pg_publication WHERE pubname = %s", (publication,))
    if cur.fetchone() is None:
        cur.execute(f"CREATE PUBLICATION {publication} FOR TABLE {', '.join(names)}")
        return
    cur.execute(
        "SELECT schemaname || '.' || tablename FROM pg_publication_tables WHERE pubname = %s",
        (publication,),
    )
    published = {name for (name,) in cur.fetchall()}
    missing = [n for n in names if n not in published]
    if missing:
        cur.execute(f"ALTER PUBLICATION {publication} ADD TABLE {', '.join(missing)}")


def slot_database(cur: Any, slot: str) -> str | None:
    """The database a replication slot of that name decodes, if there is one."""
    cur.execute("SELECT database FROM pg_replication_slots WHERE slot_name = %s", (slot,))
    row = cur.fetchone()
    return None if row is None else str(row[0])


def drop_slot(cur: Any, slot: str) -> None:
    cur.execute("SELECT pg_drop_replication_slot(%s)", (slot,))


def check_all(cur: Any, tables: Sequence[Table]) -> dict[str, Columns]:
    return {t.name: check_table(cur, t) for t in tables}
