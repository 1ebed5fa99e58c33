"""Shop activity, made up: the seed orders, and the changes a busy shop makes to them.

``Activity.choose(rows)`` picks the next change from the table's current rows: new orders come
in open, open orders get paid, paid ones shipped, the oldest shipped ones are archived
(deleted), and now and then an open order's total is amended. It keeps the table at a few dozen
orders however long it runs. Deterministic for a seed and the same rows.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from demo.orders.app import STATUSES

CUSTOMERS = ["ada", "grace", "alan", "edsger", "barbara"]
SEED_ORDERS = [
    ("ada", "open", "42.00"), ("ada", "paid", "17.50"), ("grace", "open", "120.00"),
    ("grace", "shipped", "8.99"), ("alan", "paid", "64.10"), ("edsger", "open", "5.25"),
    ("barbara", "shipped", "230.00"), ("barbara", "open", "19.99"),
]  # fmt: skip
"""(customer, status, total) of the orders a new shop starts with."""
TARGET_ORDERS = 30
"""About how many orders the activity keeps in the table."""

Order = dict[str, Any]
"""A row of the table as the views show it: ``id``, ``customer``, ``status``, ``total``."""


@dataclass(frozen=True)
class Change:
    """One statement: ``insert`` (``id`` is None: the table assigns it), ``update`` or
    ``delete`` of the order ``id``."""

    op: str
    id: int | None
    customer: str = ""
    status: str = ""
    total: str = ""


def next_status(status: str) -> str:
    return STATUSES[min(STATUSES.index(status) + 1, len(STATUSES) - 1)]


class Activity:
    """An endless, reproducible stream of plausible changes to the orders table."""

    def __init__(self, seed: int = 7, customers: list[str] | None = None) -> None:
        self.rng = random.Random(seed)
        self.customers = customers or CUSTOMERS

    def choose(self, rows: dict[int, Order]) -> Change:
        rng = self.rng
        crowded = len(rows) >= TARGET_ORDERS
        roll = rng.random()
        shipped = sorted(i for i, r in rows.items() if r["status"] == "shipped")
        moving = sorted(i for i, r in rows.items() if r["status"] != "shipped")
        if not rows or roll < (0.15 if crowded else 0.4):
            total = Decimal(rng.randint(100, 50_000)) / 100
            return Change("insert", None, rng.choice(self.customers), "open", f"{total:.2f}")
        if shipped and (roll < (0.45 if crowded else 0.5) or len(shipped) > len(rows) // 2):
            return Change("delete", shipped[0])  # the oldest shipped order is archived
        if not moving:
            return Change("delete", shipped[0])
        order = rows[rng.choice(moving)]
        if order["status"] == "open" and roll > 0.9:
            amended = Decimal(order["total"]) + Decimal(rng.randint(-500, 2_000)) / 100
            return Change("update", order["id"], order["customer"], "open",
                          f"{max(Decimal(0), amended):.2f}")  # fmt: skip
        status = next_status(order["status"])
        return Change("update", order["id"], order["customer"], status, order["total"])


def seed_changes() -> list[Change]:
    return [Change("insert", None, c, s, t) for c, s, t in SEED_ORDERS]
