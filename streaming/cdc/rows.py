"""A declared table's row changes, as events: checked against the declaration, column by
column, before anything is appended.

``Follow`` is one declared table matched to the database's current columns (from a pgoutput
Relation message, or the catalog for the snapshot). It refuses columns that were dropped,
renamed or changed to a type the declared field cannot hold, and rows that fail the declared
schema, with a sentence naming the table, the row's key and the column.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from liveviews.app import App
from liveviews.cdc.errors import SourceChanged
from liveviews.cdc.pgoutput import Delete, Insert, Tuple, Update
from liveviews.cdc.values import BadValue, declare_as, fits, to_json
from liveviews.errors import InvalidEvent
from liveviews.log.events import Event
from liveviews.tables import OLD_KEY, Table

TYPE_NAMES = {16: "boolean", 20: "bigint", 21: "smallint", 23: "integer", 25: "text",
              114: "json", 700: "real", 701: "double precision", 1043: "varchar",
              1082: "date", 1114: "timestamp", 1184: "timestamptz", 1700: "numeric",
              2950: "uuid", 3802: "jsonb"}  # fmt: skip


def type_name(oid: int) -> str:
    return TYPE_NAMES.get(oid, f"the type of oid {oid}")


@dataclass(frozen=True)
class Follow:
    """A declared table and where each declared column is in the database's rows."""

    table: Table
    positions: dict[str, int]
    types: dict[str, int]

    @classmethod
    def match(cls, table: Table, columns: Sequence[tuple[str, int]]) -> Follow:
        """``columns``: the database's (name, type oid) in row order. Undeclared ones are
        ignored; a declared one that is missing or of an incompatible type stops here."""
        where = {name: (i, oid) for i, (name, oid) in enumerate(columns)}
        positions, types = {}, {}
        for name, field in table.columns.items():
            if name not in where:
                raise SourceChanged(
                    f"column {name!r} of {table.qualified} is gone (dropped or renamed) but is "
                    f"declared: remove it from the table's declaration (and the views that read "
                    "it), or add the column back, then start the CDC process again."
                )
            i, oid = where[name]
            if not fits(field, oid):
                raise SourceChanged(
                    f"column {name!r} of {table.qualified} is of type {type_name(oid)}, which the "
                    f"declared {type(field).__name__}() cannot hold: declare it as "
                    f"{declare_as(oid)} (and change the views that read it), then start the CDC "
                    "process again."
                )
            positions[name], types[name] = i, oid
        return cls(table, positions, types)

    def row(self, values: Tuple, old: Tuple | None = None) -> dict[str, Any]:
        """Every declared column of a row, as JSON. A value PostgreSQL did not send (a large
        one an update left unchanged) is taken from ``old``, the old row when sent whole."""
        out: dict[str, Any] = {}
        for name, i in self.positions.items():
            kind, text = values[i]
            if kind == "u":
                if old is None or old[i][0] == "u":
                    raise SourceChanged(
                        f"an update of {self.table.qualified} left column {name!r} unchanged "
                        "without sending its (large) value: run ALTER TABLE "
                        f"{self.table.qualified} REPLICA IDENTITY FULL so that updates carry "
                        "the old row whole, then start the CDC process again."
                    )
                kind, text = old[i]
            try:
                out[name] = to_json(self.types[name], text)
            except BadValue as exc:
                raw_key = {c: values[self.positions[c]][1] for c in self.table.key}
                raise self._bad_row(raw_key, name, str(exc)) from None
        return out

    def key_of(self, values: Tuple) -> dict[str, Any]:
        return {c: to_json(self.types[c], values[self.positions[c]][1]) for c in self.table.key}

    def _bad_row(self, row: dict[str, Any], column: str | None, problem: str) -> SourceChanged:
        key = {c: row.get(c) for c in self.table.key}
        at = f", column {column!r}" if column else ""
        return SourceChanged(
            f"the row of {self.table.qualified} with key {key}{at} does not fit the declaration "
            f"({problem}): change the column's declaration so that it takes the value, then "
            "start the CDC process again, which reads the row as it was committed."
        )

    def event(self, app: App, operation: str, payload: dict[str, Any], time_ms: int) -> Event:
        """An event of this table, its payload checked against the declared schema."""
        type_name = self.table.event_type(operation)
        try:
            app.event_types[type_name].schema.validate(payload)
        except InvalidEvent as exc:
            row = payload.get(OLD_KEY, payload) if operation == "delete" else payload
            raise self._bad_row(row, exc.field, exc.message.rstrip(".")) from None
        key = self.table.partition_key_of(operation)(payload)
        return Event(type_name, key, payload, time_ms)

    def change(self, app: App, change: Insert | Update | Delete, time_ms: int) -> Event:
        """The event of one replicated row change."""
        if isinstance(change, Insert):
            return self.event(app, "insert", self.row(change.new), time_ms)
        if isinstance(change, Update):
            whole_old = change.old if change.old is not None and not change.old_is_key else None
            payload = self.row(change.new, whole_old)
            old_key = self.key_of(change.old) if change.old is not None else None
            payload[OLD_KEY] = old_key or {c: payload[c] for c in self.table.key}
            return self.event(app, "update", payload, time_ms)
        payload = {OLD_KEY: self.key_of(change.old)}
        if self.table.needs_old_row:
            column = self.table.partition_by
            assert column is not None
            if change.old_is_key:
                raise SourceChanged(
                    f"a delete from {self.table.qualified} did not carry column {column!r}, "
                    f"which places its events: run ALTER TABLE {self.table.qualified} REPLICA "
                    "IDENTITY FULL, then start the CDC process again."
                )
            payload[column] = to_json(self.types[column], change.old[self.positions[column]][1])
        return self.event(app, "delete", payload, time_ms)
