"""The shop's views (demo/orders): the pure pipeline on small static DataFrames, and the
streaming query over row-change events in the log, each view compared with a recomputation
from the table the changes were made to.

The events are the ones change data capture appends for a table declared with ``App.table``
(``liveviews.tables``): here they are appended with ``EventLog``, so these tests need no
database; tests/browser/test_orders_demo.py runs the whole chain from PostgreSQL.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Iterator
from typing import Any

import orjson
import pytest

from demo.orders import app
from demo.orders.activity import Activity, Change, Order, seed_changes
from demo.orders.app import BOARD_SIZE, STATUSES
from demo.orders.views import orders
from liveviews.changes.topic import read_snapshot
from liveviews.log.eventlog import EventLog
from liveviews.log.events import Event, Transaction, partition_for
from liveviews.pipeline.views import EVENT_SCHEMA
from tests.support.pipeline import RunningPipeline

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z


class Table:
    """The orders table as a database holds it, and the events its changes become."""

    def __init__(self) -> None:
        self.rows: dict[int, Order] = {}
        self.changed_ms: dict[int, int] = {}
        self.serial = 0

    def apply(self, change: Change, time_ms: int) -> Event:
        if change.op == "insert":
            self.serial += 1
            order = change.id if change.id is not None else self.serial
            row = self._row(order, change)
            self.rows[order], self.changed_ms[order] = row, time_ms
            return Event("orders_insert", str(order), dict(row), time_ms)
        assert change.id is not None
        old_key = {"id": change.id}
        if change.op == "delete":
            del self.rows[change.id]
            return Event("orders_delete", str(change.id), {"old_key": old_key}, time_ms)
        row = self._row(change.id, change)
        self.rows[change.id], self.changed_ms[change.id] = row, time_ms
        return Event("orders_update", str(change.id), {**row, "old_key": old_key}, time_ms)

    @staticmethod
    def _row(order: int, change: Change) -> Order:
        return {"id": order, "customer": change.customer, "status": change.status,
                "total": change.total}  # fmt: skip

    def expected(self) -> dict[tuple[str, str], dict[str, Any]]:
        """Each view's rows, recomputed from the table: a customer's orders; per status, the
        ``BOARD_SIZE`` orders changed last (ties: the highest row id)."""
        out: dict[tuple[str, str], dict[str, Any]] = {}
        for order, row in self.rows.items():
            out.setdefault(("orders", row["customer"]), {})[str(order)] = row
        for status in STATUSES:
            mine = [o for o, r in self.rows.items() if r["status"] == status]
            mine.sort(key=lambda o: (self.changed_ms[o], str(o)), reverse=True)
            if mine:
                rows = {str(o): self.rows[o] for o in mine[:BOARD_SIZE]}
                out[("orders_by_status", status)] = rows
        return out


def frame(spark: Any, events: list[Event]) -> Any:
    rows = []
    for i, e in enumerate(events):
        part = partition_for(e.key, 4)
        rows.append((part, f"{T0 + i}-0", e.type, e.key, orjson.dumps(e.payload).decode(),
                     e.time_ms, T0 + i))  # fmt: skip
    return spark.createDataFrame(rows, EVENT_SCHEMA)


def changes(df: Any) -> dict[tuple[str, str, str], Any]:
    """(view, key, row) -> new value (None: deleted)."""
    return {
        (r["view"], r["key"], r["row"]): None if r["value"] is None else orjson.loads(r["value"])
        for r in df.collect()
    }


def test_table_events_are_the_declared_ones():
    table = Table()
    for i, change in enumerate(seed_changes()):
        event = table.apply(change, T0 + i)
        assert app.validate({"type": event.type, "payload": event.payload}).key == event.key


def test_an_order_moves_between_statuses_and_customers(spark):
    table = Table()
    events = [
        table.apply(Change("insert", None, "ada", "open", "10.00"), T0),
        table.apply(Change("update", 1, "ada", "paid", "10.00"), T0 + 1),
        table.apply(Change("update", 1, "grace", "paid", "12.50"), T0 + 2),
    ]
    out = changes(orders(frame(spark, events)))
    row = {"id": 1, "customer": "grace", "status": "paid", "total": "12.50"}
    assert out == {
        ("orders", "ada", "1"): None,
        ("orders", "grace", "1"): row,
        ("orders_by_status", "open", "1"): None,
        ("orders_by_status", "paid", "1"): row,
    }


def test_a_delete_takes_the_order_off_every_view_it_was_on(spark):
    table = Table()
    placed = [table.apply(Change("insert", None, "alan", "shipped", "3.00"), T0)]
    changes(orders(frame(spark, placed)))
    events = [*placed, table.apply(Change("delete", 1), T0 + 1)]
    out = changes(orders(frame(spark, events)))
    assert out == {("orders", "alan", "1"): None, ("orders_by_status", "shipped", "1"): None}
    # A delete of an order the views never saw (or a second delete) changes nothing.
    assert changes(orders(frame(spark, events[1:] * 2))) == {}


def test_other_tables_events_are_not_the_shops(spark):
    other = Event("customers_insert", "7", {"id": 7, "customer": "x", "status": "open",
                                            "total": "1.00"}, T0)  # fmt: skip
    assert changes(orders(frame(spark, [other]))) == {}


class Writer:
    """Appends each transaction's events at once, as the CDC process does: the events carry
    their transaction, so a micro-batch never holds part of one."""

    def __init__(self, log: EventLog, table: Table) -> None:
        self.log, self.table = log, table
        self.clock, self.lsn = T0, 0

    def commit(self, changes: Iterable[Change]) -> None:
        """One transaction; a generator of ``changes`` sees each one applied before the next."""
        events = []
        for change in changes:
            self.clock += 1
            events.append(self.table.apply(change, self.clock))
        self.lsn += 1
        tx = Transaction(f"0/{self.lsn:X}", len(events))
        self.log.append_validated([Event(e.type, e.key, e.payload, e.time_ms, tx) for e in events])


def views_of(store: Any, shards: int, table: Table) -> dict[tuple[str, str], dict[str, Any]]:
    keys = {("orders", c) for c in {r["customer"] for r in table.rows.values()} | set(CUSTOMERS)}
    keys |= {("orders_by_status", s) for s in STATUSES}
    out = {}
    for view, key in sorted(keys):
        rows = read_snapshot(store, view, key, shards).rows
        if rows:
            out[(view, key)] = rows
    return out


CUSTOMERS = ["ada", "grace", "alan", "edsger", "barbara", "linus"]


@pytest.mark.timeout(300)
def test_views_equal_a_recomputation_from_the_table(spark, store, settings):
    """Seed orders, then rounds of shop activity in transactions of 1 to 20 changes, some
    moving orders between customers, until one status holds more orders than the board shows;
    after each round every view equals its recomputation from the table."""
    pipeline = RunningPipeline(spark, settings, app)
    try:
        table = Table()
        writer = Writer(EventLog(store, app, settings.log_partitions), table)
        writer.commit(seed_changes())
        activity, rng = Activity(seed=11, customers=CUSTOMERS), random.Random(5)

        def picks(size: int) -> Iterator[Change]:
            for _ in range(size):
                change = activity.choose(table.rows)
                if change.op == "update" and rng.random() < 0.15:  # moved to another customer
                    change = Change("update", change.id, rng.choice(CUSTOMERS), change.status,
                                    change.total)  # fmt: skip
                yield change

        for round_ in range(5):
            for _ in range(rng.randint(3, 10)):
                writer.commit(picks(rng.choice([1, 1, 2, 5, 20])))
            if round_ == 3:
                writer.commit([Change("insert", None, "linus", "open", f"{n}.00")
                               for n in range(BOARD_SIZE + 10)])  # fmt: skip
            pipeline.wait_until_caught_up(store)
            assert views_of(store, settings.change_shards, table) == table.expected()
        assert sum(r["status"] == "open" for r in table.rows.values()) > BOARD_SIZE
    finally:
        pipeline.stop()
