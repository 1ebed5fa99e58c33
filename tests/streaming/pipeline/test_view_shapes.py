"""The section "The query for each shape" of docs/VIEWS.md, run as it stands.

The page's blocks between ``<!-- shapes:begin -->`` and ``<!-- shapes:end -->`` are run in
order in one namespace, as a reader would paste them into a module: so this test cannot drift
from the page. Its application (a small shop, one pipeline per shape) then gets random events
with explicit event times, in several append batches, and every pipeline's query crashes once
after its sink wrote a batch and before Spark committed it; a new start on the same checkpoints
replays those batches. Each stored view must equal a recomputation in Python from the events as
appended, and a replay of the change topic; the plans must hold no Python operator. The page's
one refused shape (a latest-by-offset table joined to a stream) is pinned as refused.
"""

from __future__ import annotations

import random
import re
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from liveviews import App, Integer, Schema, String
from liveviews.log.eventlog import EventLog
from liveviews.pipeline.declared import payloads, view_changes
from liveviews.pipeline.plan import PipelineRefused
from liveviews.pipeline.sink import ChangeTopicSink
from liveviews.pipeline.views import EVENT_SCHEMA
from tests.support.checks import replayed_views, stored_views
from tests.support.pipeline import RunningPipeline

PAGE = Path(__file__).resolve().parents[3] / "docs" / "VIEWS.md"
SECTION = re.compile(r"<!-- shapes:begin -->\n(.*?)<!-- shapes:end -->", re.S)
BLOCK = re.compile(r"```python\n(.*?)```", re.S)

MINUTE = 60_000
HOUR = 60 * MINUTE
DELAY = 10 * MINUTE
"""The page's watermark delay (``withWatermark("at", "10 minutes")``)."""
BOUND = HOUR
"""The page's time bound: a payment counts within an hour of its order."""
T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z
ROUND = 3 * HOUR
"""Between two append batches' times: an order's hour and the watermark's 10 minutes pass
between them, while the events of one batch lie within 10 minutes of each other, so that no
event is ever late, however the micro-batches cut a batch."""
ROUNDS = 5
CRASH_ROUND = 2
CATALOG = {"tea": ("Green tea", 450), "mug": ("Mug", 1200), "pot": ("Teapot", 3900)}
"""The page's static table; ``cup`` and ``kettle`` are ordered too, and are not in it."""
PRODUCTS = ("tea", "mug", "pot", "cup", "kettle")
TOP = 3
"""The page's ``limit`` of ``top_products``."""

Views = dict[tuple[str, str], dict[str, Any]]


def page_namespace() -> dict[str, Any]:
    """The section's blocks, run in order in one namespace, under a module name of their own."""
    found = SECTION.search(PAGE.read_text())
    assert found, f"{PAGE} has no section between <!-- shapes:begin --> and <!-- shapes:end -->"
    namespace: dict[str, Any] = {"__name__": "views_page_shapes"}
    blocks = BLOCK.findall(found.group(1))
    assert len(blocks) >= 8, f"the section has {len(blocks)} python blocks"
    for i, block in enumerate(blocks, 1):
        exec(compile(block, f"<docs/VIEWS.md, shapes block {i}>", "exec"), namespace)
    return namespace


# -- the events ------------------------------------------------------------------------------


def _round(
    rng: random.Random, k: int, unpaid: list[str], paying: bool = True
) -> list[dict[str, Any]]:
    """One append batch: its events dated within 10 minutes of ``T0 + k * ROUND``. ``unpaid``:
    the orders of the rounds before without a payment within the hour, which may be paid now,
    too late (and are taken out of it here). Not ``paying``: no payment at all, so that orders
    alone move the joins' watermark."""
    start = T0 + k * ROUND
    out: list[dict[str, Any]] = []

    def add(kind: str, at: int, **payload: Any) -> None:
        out.append({"type": kind, "payload": payload, "time": at})

    for _ in range(rng.randint(6, 10)):
        user = f"u{rng.randrange(5)}"
        if rng.random() < 0.5:
            add("deposit", start + rng.randrange(6 * MINUTE), user=user,
                amount=rng.randint(1, 50))  # fmt: skip
        else:
            add("transfer", start + rng.randrange(6 * MINUTE), sender=user,
                receiver=f"u{rng.randrange(5)}", amount=rng.randint(1, 50))  # fmt: skip
    for i in range(6):
        order, at = f"o{k}-{i}", start + 1 * MINUTE + rng.randrange(5 * MINUTE)
        add("order", at, order_id=order, customer=f"c{rng.randrange(4)}",
            product=rng.choice(PRODUCTS), quantity=rng.randint(1, 4))  # fmt: skip
        roll = rng.random() if paying else 1.0
        if roll < 0.5:  # paid within the hour
            add("payment", at + rng.randrange(3 * MINUTE), order_id=order,
                amount=rng.randint(1, 100))  # fmt: skip
        else:
            if roll < 0.6:  # a payment dated before its order: outside the bound
                add("payment", at - 1000 - rng.randrange(MINUTE), order_id=order,
                    amount=rng.randint(1, 100))  # fmt: skip
            unpaid.append(order)
    for order in list(unpaid):
        if paying and not order.startswith(f"o{k}-") and rng.random() < 0.4:  # paid hours later
            add("payment", start + rng.randrange(6 * MINUTE), order_id=order,
                amount=rng.randint(1, 100))  # fmt: skip
            unpaid.remove(order)
    for _ in range(10):
        cart, product = f"k{rng.randrange(3)}", rng.choice(PRODUCTS[:4])
        kind = "cart_remove" if rng.random() < 0.4 else "cart_add"
        add(kind, start + rng.randrange(6 * MINUTE), cart=cart, product=product)
    for _ in range(3):
        add("profile_set", start + rng.randrange(6 * MINUTE), user=f"u{rng.randrange(5)}",
            name=rng.choice(["Ada", "Ben", "Cy", "Di", "Eve"]))  # fmt: skip
    return out


def _recompute(events: list[dict[str, Any]]) -> Views:
    """The section's views from the events in the order appended: a key's events are in one
    log partition, in that order."""
    out: Views = defaultdict(dict)
    balance: dict[str, int] = defaultdict(int)
    carts: dict[tuple[str, str], int] = defaultdict(int)
    names: dict[str, str] = {}
    units: dict[tuple[str, str], int] = defaultdict(int)
    orders: dict[str, dict[str, Any]] = {}
    payments: list[dict[str, Any]] = []
    for e in events:
        p, kind = e["payload"], e["type"]
        if kind == "deposit":
            balance[p["user"]] += p["amount"]
        elif kind == "transfer":
            balance[p["sender"]] -= p["amount"]
            balance[p["receiver"]] += p["amount"]
        elif kind in ("cart_add", "cart_remove"):
            carts[(p["cart"], p["product"])] += 1 if kind == "cart_add" else -1
        elif kind == "profile_set":
            names[p["user"]] = p["name"]
        elif kind == "order":
            orders[p["order_id"]] = {**p, "at": e["time"]}
            units[(p["customer"], p["product"])] += p["quantity"]
        elif kind == "payment":
            payments.append({**p, "at": e["time"]})
    for user, n in balance.items():
        out[("balances", user)]["balances"] = {"balance": n}
    for (cart, product), n in carts.items():
        if n > 0:
            out[("carts", cart)][product] = {"quantity": n}
    for user, name in names.items():
        out[("profiles", user)]["profiles"] = {"name": name}
    by_customer: dict[str, list[tuple[int, str]]] = defaultdict(list)
    for (customer, product), n in units.items():
        by_customer[customer].append((n, product))
    for customer, ranked in by_customer.items():
        # The store ranks rows of one score in reverse order of their ids, as ZREVRANGE does.
        for n, product in sorted(ranked, reverse=True)[:TOP]:
            out[("top_products", customer)][product] = {"units": n}
    sold: dict[str, list[int]] = {}
    for o in orders.values():
        if o["product"] in CATALOG:
            name, price = CATALOG[o["product"]]
            row = sold.setdefault(o["product"], [0, 0])
            row[0] += o["quantity"]
            row[1] += o["quantity"] * price
    for product, (n, cents) in sold.items():
        value = {"name": CATALOG[product][0], "units": n, "revenue_cents": cents}
        out[("revenue", product)]["revenue"] = value
    # The outer join's watermark once every event is in: the newest order or payment time
    # less the delay. An unpaid order is written once it is past the order's hour.
    watermark = max(x["at"] for x in [*orders.values(), *payments]) - DELAY
    for order, o in orders.items():
        paid = [x for x in payments if x["order_id"] == order and 0 <= x["at"] - o["at"] <= BOUND]
        assert len(paid) <= 1, f"{order} is paid twice within the hour: the view is ambiguous"
        if paid:
            value = {"customer": o["customer"], "amount": paid[0]["amount"]}
            out[("paid_orders", order)]["paid_orders"] = value
            out[("order_status", order)]["order_status"] = {**value, "status": "paid"}
        elif o["at"] + BOUND < watermark:
            value = {"customer": o["customer"], "amount": None, "status": "unpaid"}
            out[("order_status", order)]["order_status"] = value
    return dict(out)


def _coverage(events: list[dict[str, Any]], expected: Views) -> None:
    """The random events reach what each shape is there for."""
    views = defaultdict(list)
    for (view, _), rows in expected.items():
        views[view].append(rows)
    statuses = [r["order_status"]["status"] for r in views["order_status"]]
    assert "paid" in statuses and "unpaid" in statuses, statuses
    pending = [e for e in events if e["type"] == "order"
               and ("order_status", e["payload"]["order_id"]) not in expected]  # fmt: skip
    assert pending, "every order is final: the last batch's unpaid orders should still wait"
    moved_by_orders = [key for (view, key), rows in expected.items() if view == "order_status"
                       and key.startswith(f"o{ROUNDS - 2}-")
                       and rows["order_status"]["status"] == "unpaid"]  # fmt: skip
    assert moved_by_orders, "no unpaid order is written by a watermark that orders alone moved"
    assert any(len(rows) == TOP for rows in views["top_products"]), "no key reaches the limit"
    assert 0 < len(views["revenue"]) <= len(CATALOG)
    assert any(e["payload"]["product"] not in CATALOG for e in events if e["type"] == "order")
    running: dict[tuple[str, str], int] = defaultdict(int)
    emptied = False
    for e in events:
        if e["type"] in ("cart_add", "cart_remove"):
            key = (e["payload"]["cart"], e["payload"]["product"])
            was = running[key]
            running[key] += 1 if e["type"] == "cart_add" else -1
            emptied = emptied or (was > 0 and running[key] == 0)
    assert emptied, "no cart row falls back to zero"
    for view in ("balances", "paid_orders", "carts", "profiles"):
        assert views[view], f"no row of {view}"


# -- the tests -------------------------------------------------------------------------------


def test_each_shape_of_the_page_equals_a_recomputation_through_a_crash(
    store, settings, spark, monkeypatch
):
    shapes = page_namespace()
    app: App = shapes["app"]
    assert set(app.pipelines) == {"balances", "paid_orders", "order_status", "revenue",
                                  "carts", "profiles", "top_products"}  # fmt: skip
    calls: list[tuple[str, int, int]] = []  # (pipeline, batch id, rows) of each sink call
    rows_of: dict[str, int] = {}  # each pipeline's rows in its sink's last call
    crashed: dict[str, int] = {}
    armed = False
    call, apply = ChangeTopicSink.__call__, ChangeTopicSink.write

    def recorded(self: ChangeTopicSink, rows: list[Any], batch_id: int, *args: Any) -> None:
        calls.append((self.name, batch_id, len(rows)))
        rows_of[self.name] = len(rows)
        apply(self, rows, batch_id, *args)

    def call_then_crash(self: ChangeTopicSink, batch: DataFrame, batch_id: int) -> None:
        call(self, batch, batch_id)
        if armed and self.name not in crashed and rows_of[self.name] > 0:
            crashed[self.name] = batch_id
            raise RuntimeError(f"crash after the sink wrote batch {batch_id} of {self.name}")

    monkeypatch.setattr(ChangeTopicSink, "write", recorded)
    monkeypatch.setattr(ChangeTopicSink, "__call__", call_then_crash)
    rng = random.Random(20261)
    log = EventLog(store, app, settings.log_partitions)
    written: list[dict[str, Any]] = []
    unpaid: list[str] = []
    running = RunningPipeline(spark, settings, app)
    try:
        for k in range(ROUNDS):
            # The last batch has no payment: the page's one watermark on both types moves
            # with the orders alone, and writes the unpaid orders of the batch before.
            batch = _round(rng, k, unpaid, paying=k < ROUNDS - 1)
            if k == CRASH_ROUND:
                # Each query fails once, in the first batch from here that changes rows,
                # after its sink applied the changes and before Spark committed the batch.
                armed = True
            log.append_batch(batch)
            written += batch
            if k == CRASH_ROUND:
                deadline = time.monotonic() + 120
                while not all(q.exception() is not None for q in running.queries):
                    assert time.monotonic() < deadline, f"only {sorted(crashed)} crashed"
                    time.sleep(0.1)
                assert set(crashed) == set(app.pipelines)
                running.stop()
                # Spark runs each crashed batch again, from its offset log: its sink finds
                # what that batch already applied.
                running = RunningPipeline(spark, settings, app)
            running.wait_until_caught_up(store)
        expected = _recompute(written)
        _coverage(written, expected)
        # The outer join writes the unpaid orders in a micro-batch without new events, which
        # Spark runs once the last batch has moved the watermark.
        deadline = time.monotonic() + 60
        while (stored := stored_views(store, settings.change_shards)) != expected:
            running.assert_running()
            if time.monotonic() > deadline:
                break
            time.sleep(0.2)
    finally:
        running.stop()
    assert stored == expected, _difference(stored, expected)
    for name, batch_id in crashed.items():
        runs = [rows for p, b, rows in calls if (p, b) == (name, batch_id)]
        assert len(runs) == 2 and runs[0] == runs[1] > 0, (name, batch_id, runs)
    replayed, deltas = replayed_views(store, settings.change_shards)
    assert replayed == stored and deltas > 0


def _difference(stored: Views, expected: Views) -> str:
    lines = [f"{k}: stored {stored.get(k)!r}, recomputed {expected.get(k)!r}"
             for k in sorted(set(stored) | set(expected)) if stored.get(k) != expected.get(k)]  # fmt: skip
    return "the stored views differ from the recomputation:\n" + "\n".join(lines[:20])


def test_the_shapes_run_no_python_per_event(spark):
    app: App = page_namespace()["app"]
    events = spark.createDataFrame(
        [(0, "1-0", "order", "o1", '{"order_id": "o1", "customer": "c", "product": "tea", '
          '"quantity": 1}', T0, T0)], EVENT_SCHEMA,
    )  # fmt: skip
    for name, pipeline in app.pipelines.items():
        plan = pipeline.build(events)._jdf.queryExecution().executedPlan().toString()
        assert "Python" not in plan and "ArrowEval" not in plan, f"{name}: {plan}"


@pytest.mark.parametrize(
    ("mode", "said"),
    [("update", "possible 'correctness' issue due to global watermark"),
     ("append", "streaming aggregations without watermark")],
)  # fmt: skip
def test_a_latest_by_offset_table_joined_with_a_stream_is_refused(
    store, settings, spark, mode, said
):
    """The page's word on a table kept as events: each product's latest price by offset,
    joined with the orders, is an aggregation feeding a join, which Spark refuses."""
    app = App("prices")
    app.event_type("price_set", Schema({"product": String(), "price_cents": Integer()}),
                   lambda p: p["product"])  # fmt: skip
    app.event_type("order", Schema({"order_id": String(), "product": String()}),
                   lambda p: p["order_id"])  # fmt: skip
    app.view("priced_orders", description="each order at its product's latest price")

    @app.pipeline("priced_orders", views=["priced_orders"], output_mode=mode)
    def priced_orders(events: DataFrame) -> DataFrame:
        prices = (
            payloads(events, app, "price_set")
            .groupBy("product")
            .agg(F.max_by("price_cents", "position").alias("price_cents"))
        )
        priced = (
            payloads(events, app, "order").select("order_id", "product").join(prices, "product")
        )
        return view_changes(priced, "priced_orders", key="order_id")

    with pytest.raises(PipelineRefused, match=re.escape(said)):
        RunningPipeline(spark, settings, app).stop()
