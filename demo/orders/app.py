"""The shop application: the ``orders`` table of a PostgreSQL database, and two live views of it.

The table's rows come into the log through change data capture (``python -m liveviews.cdc``):
nobody publishes them, the database is written with plain SQL (``python -m demo.orders``, or
``psql``). ``schema.sql`` creates the table.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from liveviews import App, FieldType, Integer, String

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

STATUSES = ("open", "paid", "shipped")
"""An order's life, in order; the table's check constraint allows these only."""
BOARD_SIZE = 50
"""Orders per status on the board: the most recently changed ones."""

COLUMNS: dict[str, FieldType] = {
    "id": Integer(),
    "customer": String(max_length=64),
    "status": String(max_length=16),
    "total": String(max_length=16),
}
"""The columns the views read. ``total`` is ``numeric(10,2)``: its exact text, never a float."""


def samples(now_ms: int) -> list[dict[str, Any]]:
    """An order placed, paid, moved to another customer and deleted: every path of the
    pipeline once, as change data capture would append them (``App.samples``)."""
    row = {"id": 1, "customer": "ada", "status": "open", "total": "1.00"}
    changes = [
        ("orders_insert", row),
        ("orders_update", {**row, "status": "paid", "old_key": {"id": 1}}),
        ("orders_update", {**row, "customer": "alan", "old_key": {"id": 1}}),
        ("orders_delete", {"old_key": {"id": 1}}),
    ]
    return [{"type": t, "payload": p, "time": now_ms + i} for i, (t, p) in enumerate(changes)]


app = App("shop", samples=samples)
app.table(
    "orders",
    columns=COLUMNS,
    key=("id",),
    description="An order of the shop: who placed it, where it is, what it costs.",
)


def declare_views(app: App) -> None:
    """The views and the pipeline that computes them, from events ``orders_insert``,
    ``orders_update`` and ``orders_delete`` however they reach the log."""
    app.view("orders", description="A customer's orders, by order id.")
    app.view(
        "orders_by_status",
        description=f"The {BOARD_SIZE} orders of a status changed last, by order id.",
        limit=BOARD_SIZE,
    )

    @app.pipeline("orders", views=["orders", "orders_by_status"])
    def orders(events: DataFrame) -> DataFrame:
        from demo.orders.views import orders as build

        return build(events)


declare_views(app)
