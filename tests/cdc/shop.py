"""The application the change data capture tests follow: two tables, one partitioned by a
column that is not its key (so its deletes need the old row), one by its composite key."""

from __future__ import annotations

from liveviews import App, Integer, String

app = App("shop")
orders = app.table(
    "orders",
    columns={
        "id": Integer(),
        "customer": String(),
        "status": String(),
        "total": String(optional=True),
    },
    key=("id",),
    partition_by="customer",
    description="an order; a customer's orders share a partition",
)
items = app.table(
    "items",
    columns={"order_id": Integer(), "line": Integer(), "sku": String(), "qty": Integer()},
    key=("order_id", "line"),
)

SCHEMA = """
CREATE TABLE orders (id bigint PRIMARY KEY, customer text NOT NULL, status text NOT NULL,
                     total numeric(12, 2), note text);
ALTER TABLE orders REPLICA IDENTITY FULL;
CREATE TABLE items (order_id bigint, line int, sku text NOT NULL, qty int NOT NULL,
                    PRIMARY KEY (order_id, line));
"""
"""``note`` is not declared: an undeclared column is left out of the events."""
