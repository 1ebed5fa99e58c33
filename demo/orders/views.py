"""The shop's views, as a Spark pipeline: a pure function from the event DataFrame to row
changes.

Each order's changes are keyed by its id, so they are totally ordered in one log partition.
``OrderProcessor`` keeps each order's current row in Spark's state store and turns every
insert, update and delete into the rows it adds to and takes from ``orders/{customer}`` and
``orders_by_status/{status}``. It needs that state: a delete carries only the order's old key,
and an update that moves an order to another customer or status must take it off the old
one's rows.

An order's id must never change (docs/CDC.md: a row's partition key never changes): an update
that changes it lands in the new id's partition and bucket, where the old id's state is not, so
the old id's rows would stay. The shop's ids come from a sequence and are never updated.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson
from pyspark.sql import Column, DataFrame, Row
from pyspark.sql import functions as F
from pyspark.sql.streaming.stateful_processor import (
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)
from pyspark.sql.types import BinaryType, StringType, StructField, StructType

from liveviews import CHANGE_SCHEMA, Changes, isolated

BUCKETS = 64
"""Grouping keys of the pipeline: an order's state lives in bucket crc32(key) % BUCKETS, so a
micro-batch costs one processor call per bucket it touches, not one per order. A pipeline's
checkpoint keeps the count it was created with."""

ORDER_ID = StructType([StructField("id", StringType())])
ORDER_ROW = StructType([StructField("row", BinaryType())])


class Shop:
    """Orders' current rows and the view rows their changes cause: pure Python, no Spark.

    ``rows`` maps an order id (text) to its row as the views show it: ``id``, ``customer``,
    ``status``, ``total``. ``load`` and ``store`` reach the state that holds them.
    """

    def __init__(self, changes: Changes, load: Any, store: Any) -> None:
        self.changes = changes
        self.load = load
        self.store = store

    def apply(self, type_: str, payload: dict[str, Any], time_ms: int) -> None:
        op = type_.rpartition("_")[2]
        if op in ("update", "delete"):
            old = str(payload["old_key"]["id"])
            if op == "delete" or old != str(payload["id"]):
                self.remove(old)  # deleted, or its key changed: the old id is gone
        if op in ("insert", "update"):
            self.put(order_value(payload), time_ms)

    def put(self, new: dict[str, Any], time_ms: int) -> None:
        order = str(new["id"])
        old = self.load(order)
        if old is not None and old["customer"] != new["customer"]:
            self.changes.delete("orders", old["customer"], order)
        if old is not None and old["status"] != new["status"]:
            self.changes.delete("orders_by_status", old["status"], order)
        self.changes.upsert("orders", new["customer"], order, new)
        self.changes.upsert("orders_by_status", new["status"], order, new, time_ms)
        self.store(order, new)

    def remove(self, order: str) -> None:
        old = self.load(order)
        if old is None:
            return  # deleted twice, or never seen: nothing shows it
        self.changes.delete("orders", old["customer"], order)
        self.changes.delete("orders_by_status", old["status"], order)
        self.store(order, None)


def order_value(payload: dict[str, Any]) -> dict[str, Any]:
    """An order's row in the views: the table's columns the views show."""
    return {k: payload[k] for k in ("id", "customer", "status", "total")}


class OrderProcessor(StatefulProcessor):
    """The orders of one bucket, each one row of map state keyed by order id. Runs on
    executors; the events of a call come in log order (``isolated`` sorts them)."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.orders = handle.getMapState("orders", ORDER_ID, ORDER_ROW)

    def handleInputRows(
        self, key: Any, rows: Iterator[Row], timerValues: TimerValues
    ) -> Iterator[Row]:
        changes = Changes()
        shop = Shop(changes, self._load, self._store)
        for row in rows:
            shop.apply(row.type, orjson.loads(row.payload), int(row.event_time_ms))
        yield from changes.rows()

    def _load(self, order: str) -> dict[str, Any] | None:
        stored = self.orders.getValue((order,))
        return orjson.loads(stored[0]) if stored else None

    def _store(self, order: str, row: dict[str, Any] | None) -> None:
        if row is None:
            self.orders.removeKey((order,))
        else:
            self.orders.updateValue((order,), (orjson.dumps(row),))

    def close(self) -> None:
        pass


def bucket_of(key: Column) -> Column:
    """An order's bucket: CRC-32 is a fixed function, so its state stays where it is from one
    Spark version to the next."""
    return F.crc32(key.cast("binary")) % BUCKETS


def orders(events: DataFrame) -> DataFrame:
    # Only the columns the processor reads cross to Python (and those ``isolated`` needs to
    # name a bad event); other tables' events are not the shop's.
    mine = events.where(F.col("type").startswith("orders_")).select(
        bucket_of(F.col("key")).alias("bucket"), "partition", "offset", "type", "payload",
        "event_time_ms",
    )  # fmt: skip
    return mine.groupBy("bucket").transformWithState(
        isolated(OrderProcessor()), CHANGE_SCHEMA, "Update", "None"
    )
