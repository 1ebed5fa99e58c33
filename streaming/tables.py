"""Database tables as sources of events: what a declared table's row changes become.

A table declared with ``App.table`` is followed by change data capture (``liveviews.cdc``): each
committed row change becomes one event of ``<table>_insert``, ``<table>_update`` or
``<table>_delete``. Those types come from the database only, so clients cannot publish them.

Payloads, by operation:

``insert``  the new row: every declared column (SQL NULL is JSON null)
``update``  the new row, and ``old_key``: the row's key columns before the change
``delete``  ``old_key``, and the ``partition_by`` column when it is not a key column

The partition key is the ``partition_by`` column's value, or the key columns' values joined
with ``:``. A row's events stay in order in one partition only if that value never changes for
the row: ``partition_by`` must name a column that an update never changes.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from liveviews.errors import ConfigurationError
from liveviews.schema import FieldType, Integer, Json, Schema, String

OLD_KEY = "old_key"
OPERATIONS = ("insert", "update", "delete")
IDENT_RE = re.compile(r"[a-z_][a-z0-9_]{0,62}")
"""A PostgreSQL name that needs no quoting: it reads the same in SQL and in pgoutput."""


@dataclass(frozen=True)
class Table:
    """A database table whose row changes enter the log."""

    name: str
    """The table's name, which prefixes its event types (``orders``)."""
    schema: str
    """The table's PostgreSQL schema (``public`` unless declared as ``sales.orders``)."""
    columns: Mapping[str, FieldType]
    key: tuple[str, ...]
    partition_by: str | None = None
    description: str = ""

    @property
    def qualified(self) -> str:
        return f"{self.schema}.{self.name}"

    def event_type(self, operation: str) -> str:
        return f"{self.name}_{operation}"

    @property
    def needs_old_row(self) -> bool:
        """A delete must carry a column the old key does not: the table must send old rows
        whole (``REPLICA IDENTITY FULL``)."""
        return self.partition_by is not None and self.partition_by not in self.key

    def partition_of(self, row: Mapping[str, Any]) -> str:
        """The partition key of a row (or of a delete's payload)."""
        if self.partition_by is not None:
            return str(row[self.partition_by])
        return ":".join(str(row[c]) for c in self.key)

    def payload_schemas(self) -> dict[str, Schema]:
        """Each operation's payload schema, by event type name."""
        old_key = Json()
        delete_fields: dict[str, FieldType] = {OLD_KEY: old_key}
        if self.needs_old_row:
            assert self.partition_by is not None
            delete_fields[self.partition_by] = self.columns[self.partition_by]
        return {
            self.event_type("insert"): Schema(dict(self.columns), check=self._check_row),
            self.event_type("update"): Schema(
                {**self.columns, OLD_KEY: old_key}, check=self._check_row
            ),
            self.event_type("delete"): Schema(delete_fields, check=self._check_old_key),
        }

    def partition_key_of(self, operation: str) -> Callable[[dict[str, Any]], str]:
        if operation == "delete" and not self.needs_old_row:
            return lambda payload: self.partition_of(payload[OLD_KEY])
        return self.partition_of

    def _check_row(self, row: dict[str, Any]) -> str | None:
        if OLD_KEY in row:
            return self._check_old_key(row)
        return None

    def _check_old_key(self, payload: dict[str, Any]) -> str | None:
        old = payload.get(OLD_KEY)
        if not isinstance(old, dict) or sorted(old) != sorted(self.key):
            return f"{OLD_KEY!r} must be an object of the key columns {', '.join(self.key)}."
        return None


def declare_table(
    name: str,
    columns: Mapping[str, FieldType],
    key: tuple[str, ...] | list[str] | str,
    partition_by: str | None,
    description: str,
) -> Table:
    """Check a declaration (``App.table``) and make its ``Table``."""
    schema, _, table = name.rpartition(".")
    schema = schema or "public"
    for part in (schema, table):
        if IDENT_RE.fullmatch(part) is None:
            raise ConfigurationError(
                f"table {name!r}: {part!r} must be lowercase letters, digits and '_' (a name "
                "PostgreSQL needs no quotes for), optionally after a schema: 'sales.orders'."
            )
    if not columns:
        raise ConfigurationError(f"table {name!r} declares no columns; name at least its key.")
    for column, ftype in columns.items():
        if column == OLD_KEY:
            raise ConfigurationError(
                f"table {name!r}: a column may not be named {OLD_KEY!r}, which updates and "
                "deletes use for the row's key before the change; rename the column."
            )
        if IDENT_RE.fullmatch(column) is None:
            raise ConfigurationError(
                f"table {name!r}: column {column!r} must be lowercase letters, digits and '_'."
            )
        if not isinstance(ftype, FieldType):
            raise ConfigurationError(
                f"table {name!r}: column {column!r} must be a field type such as String() or "
                f"Integer(), not {ftype!r}."
            )
    keys = (key,) if isinstance(key, str) else tuple(key)
    if not keys:
        raise ConfigurationError(f"table {name!r}: key must name its primary-key columns.")
    for column in (*keys, *([partition_by] if partition_by else [])):
        if column not in columns:
            raise ConfigurationError(
                f"table {name!r}: {column!r} is not a declared column; declare it in columns."
            )
        if columns[column].optional:
            raise ConfigurationError(
                f"table {name!r}: column {column!r} places the row's events in a partition, so "
                "it cannot be optional (null); declare it without optional=True."
            )
        if not isinstance(columns[column], Integer | String):
            raise ConfigurationError(
                f"table {name!r}: column {column!r} places the row's events in a partition and "
                "must be an Integer() or a String()."
            )
    return Table(table, schema, dict(columns), keys, partition_by, description)
