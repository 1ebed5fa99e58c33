"""Views declared as queries: Spark computes them, and no Python runs per event.

A pipeline stays a pure function from the event DataFrame to change rows (``app.pipeline``);
these three functions let that function be a query instead of a state processor:

- ``payloads(events, app, *types)``: the events of some types, one typed column per field of
  their payload schema, plus their key, place in the log (``position``, for
  latest-by-offset: ``F.max_by(col, "position")``) and event time;
- ``sql(events, app, query)``: the same as tables named after the event types (and ``events``,
  every event), queried in Spark SQL;
- ``view_changes(rows, view, key=..., row=..., keep=...)``: a query's output as the changes of a
  view. Run in update mode, an aggregation outputs in each micro-batch the groups that batch
  changed; each such row upserts one row of the view, or deletes it when ``keep`` is false (a
  count back to zero, a row that left a filter).

Such a view's key and row id must be columns the query groups by, so a row never moves to
another key: a view that re-keys rows as they change (a list of "open" orders that an order
leaves when it is paid, keyed by status) needs the row's previous key, which only a state
processor keeps (Chirp's ``EntityProcessor``). docs/VIEWS.md shows both.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import (
    BooleanType,
    DataType,
    DoubleType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from liveviews.app import App
from liveviews.errors import ConfigurationError
from liveviews.schema import Boolean, Float, Integer, Json, String

EVENT_FIELDS = ("type", "key", "partition", "offset", "position", "event_time_ms")
"""The columns ``payloads`` keeps of every event, beside its payload's fields."""
RESERVED = frozenset({*EVENT_FIELDS, "payload", "ingest_time_ms"})


def spark_type(field: Any) -> DataType:
    """The Spark type of a payload field: a JSON field (``Json``) stays its JSON text."""
    if isinstance(field, String | Json):
        return StringType()
    if isinstance(field, Integer):
        return LongType()
    if isinstance(field, Float):
        return DoubleType()
    if isinstance(field, Boolean):
        return BooleanType()
    raise ConfigurationError(f"a declared view cannot read a field of type {type(field).__name__}.")


def log_position(offset: Column | str = "offset") -> Column:
    """A position (an entry id ``<ms>-<seq>``, or ``<n>`` on a Kafka log) as a struct that
    orders as the log does (the text does not: ``"10-0"`` sorts before ``"9-0"``). A key's
    events are in one partition, so within a key this is the order they were appended in."""
    parts = F.split(F.col(offset) if isinstance(offset, str) else offset, "-")
    return F.struct(
        parts.getItem(0).cast("long").alias("ms"),
        F.coalesce(F.get(parts, 1).cast("long"), F.lit(0).cast("long")).alias("seq"),
    )


def payloads(events: DataFrame, app: App, *types: str) -> DataFrame:
    """The events of ``types`` (all the application's when none is named), their payloads
    parsed by their declared schemas into typed columns: a field of one type that another does
    not have is null there. Plus ``EVENT_FIELDS``."""
    names = types or tuple(sorted(app.event_types))
    fields: dict[str, DataType] = {}
    for name in names:
        et = app.event_types.get(name)
        if et is None:
            raise ConfigurationError(
                f"unknown event type {name!r}; known types: {', '.join(sorted(app.event_types))}."
            )
        for field, ftype in et.schema.fields.items():
            if field in RESERVED:
                raise ConfigurationError(
                    f"event type {name!r}: field {field!r} has the name of an event column "
                    f"({', '.join(sorted(RESERVED))}); read it from the payload yourself."
                )
            kind = spark_type(ftype)
            if fields.setdefault(field, kind) != kind:
                raise ConfigurationError(
                    f"field {field!r} is a {fields[field].simpleString()} in one of "
                    f"{', '.join(names)} and a {kind.simpleString()} in another; read these "
                    "types apart."
                )
    schema = StructType([StructField(f, t, True) for f, t in fields.items()])
    parsed = F.from_json(F.col("payload"), schema)
    chosen = events.where(F.col("type").isin(*names))
    return chosen.select(
        "type", "key", "partition", "offset", log_position().alias("position"), "event_time_ms",
        *[parsed.getField(f).alias(f) for f in fields],
    )  # fmt: skip


def sql(events: DataFrame, app: App, query: str) -> DataFrame:
    """``query`` in Spark SQL over a table per event type of ``app``, named after it (quote
    names that are SQL words: ``SELECT tweet, count(*) FROM `like` GROUP BY tweet``), each as
    ``payloads`` gives it, and ``events``, every event as the pipeline receives it."""
    session = events.sparkSession
    # Resolved here, when the query is built: a later pipeline's tables of the same names
    # (from its own stream) do not change what this one reads.
    events.createOrReplaceTempView("events")
    for name in app.event_types:
        payloads(events, app, name).createOrReplaceTempView(name)
    return session.sql(query)


def view_changes(
    rows: DataFrame,
    view: str,
    *,
    key: str,
    row: str | None = None,
    keep: Column | None = None,
    score: str | None = None,
) -> DataFrame:
    """A query's output rows as changes of ``view``: row ``row`` (the view's name when None)
    of key ``key`` is set to the other columns, as a JSON object, or deleted where ``keep`` is
    false or null; a row whose key or row id is null is left out. ``score`` orders the rows of
    a view with a ``limit``. The value's fields are in name order, so a value that did not
    change is the same text, and the sink sends no delta for it."""
    missing = [c for c in (key, row, score) if c is not None and c not in rows.columns]
    if missing:
        raise ConfigurationError(
            f"view {view!r}: the query has no column {missing[0]!r}; its columns are "
            f"{', '.join(rows.columns)}."
        )
    named = {key, row, score}
    values = sorted(c for c in rows.columns if c not in named)
    if not values:
        raise ConfigurationError(
            f"view {view!r}: the query has no column left for the rows' value beside "
            f"{', '.join(c for c in (key, row, score) if c)}."
        )
    # A null column is written as null, not left out (to_json's default): a client sees the
    # same fields in every row of a view.
    value = F.to_json(F.struct(*values), {"ignoreNullFields": "false"})
    if keep is not None:
        value = F.when(keep, value)
    placed = F.col(key).isNotNull() & (F.col(row).isNotNull() if row is not None else F.lit(True))
    return rows.where(placed).select(
        F.lit(view).alias("view"),
        F.col(key).cast("string").alias("key"),
        (F.col(row).cast("string") if row is not None else F.lit(view)).alias("row"),
        value.alias("value"),
        (F.col(score).cast("double") if score is not None else F.lit(0.0)).alias("score"),
    )
