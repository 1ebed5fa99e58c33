"""The shop in Chromium: rows changed in PostgreSQL with plain SQL appear on the open page.

The whole chain runs (tests/support/orders_system.py): PostgreSQL, the CDC process, the shop's
pipeline on the run's SparkSession and a gateway serving demo/web/orders.html. The page is
opened once; the tests are one story, in file order, each starting from the state the previous
one left, and none reloads the page.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from tests.support.browser import OPEN_PAGES
from tests.support.orders_system import OrdersSystem

SHOWN_WITHIN_MS = 10_000
"""A change reaches the page in about a second; the bound leaves room for a slow machine."""


@pytest.fixture(scope="module")
def shop(store_url: str, spark: Any) -> Iterator[OrdersSystem]:
    system = OrdersSystem(store_url, spark)
    try:
        yield system.start()
    finally:
        system.stop()


@pytest.fixture(scope="module")
def page(browser: Any, shop: OrdersSystem) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.goto(shop.url + "/orders.html")
    expect(page.get_by_test_id("connection-state")).to_have_attribute(
        "data-state", "connected", timeout=30_000
    )
    page.evaluate("() => { window.__sameDocument = true; }")
    OPEN_PAGES["shop"] = page
    yield page
    OPEN_PAGES.clear()
    context.close()


def order(page: Page, where: str, order_id: int) -> Any:
    return page.get_by_test_id(where).locator(f'[data-testid="order"][data-id="{order_id}"]')


def ids(page: Page, where: str) -> list[int]:
    found = page.eval_on_selector_all(
        f'[data-testid="{where}"] [data-testid="order"]', "els => els.map(e => +e.dataset.id)"
    )
    return sorted(found)


def shown_after(page: Page, what: Any, started: float) -> float:
    """Wait until ``what`` holds on the page; the milliseconds since ``started``."""
    what(SHOWN_WITHIN_MS)
    return (time.monotonic() - started) * 1000


def test_the_page_shows_the_seeded_orders(page: Page) -> None:
    expect(order(page, "lane-shipped", 7)).to_have_count(1)
    assert ids(page, "lane-open") == [1, 3, 6, 8]
    assert ids(page, "lane-paid") == [2, 5]
    assert ids(page, "lane-shipped") == [4, 7]
    expect(order(page, "customer-orders", 2)).to_have_attribute("data-status", "paid")
    assert ids(page, "customer-orders") == [1, 2]  # ada's
    expect(order(page, "lane-open", 3)).to_contain_text("grace")
    expect(order(page, "lane-open", 3)).to_contain_text("$120.00")


def test_an_update_in_sql_moves_the_order_to_its_new_status(page: Page, shop: OrdersSystem):
    started = time.monotonic()
    shop.sql("UPDATE orders SET status = 'paid' WHERE id = 1")
    ms = shown_after(page, lambda t: expect(order(page, "lane-paid", 1)).to_have_count(1,
                     timeout=t), started)  # fmt: skip
    expect(order(page, "lane-open", 1)).to_have_count(0)
    expect(order(page, "customer-orders", 1)).to_have_attribute("data-status", "paid")
    print(f"UPDATE shown after {ms:.0f} ms")


def test_an_insert_in_sql_appears_in_its_lane_and_its_customers_list(page: Page,
                                                                     shop: OrdersSystem):  # fmt: skip
    started = time.monotonic()
    (new_id,) = shop.sql("INSERT INTO orders (customer, total) VALUES ('ada', 9.99) RETURNING id")
    ms = shown_after(page, lambda t: expect(order(page, "lane-open", new_id)).to_have_count(1,
                     timeout=t), started)  # fmt: skip
    expect(order(page, "lane-open", new_id)).to_contain_text("$9.99")
    expect(order(page, "customer-orders", new_id)).to_have_attribute("data-status", "open")
    expect(page.get_by_test_id("customer-summary")).to_contain_text("3 orders")
    print(f"INSERT shown after {ms:.0f} ms")


def test_a_delete_in_sql_takes_the_order_off_the_page(page: Page, shop: OrdersSystem) -> None:
    started = time.monotonic()
    shop.sql("DELETE FROM orders WHERE id = 2")
    ms = shown_after(page, lambda t: expect(order(page, "lane-paid", 2)).to_have_count(0,
                     timeout=t), started)  # fmt: skip
    expect(order(page, "customer-orders", 2)).to_have_count(0)
    assert ids(page, "lane-paid") == [1, 5]
    print(f"DELETE shown after {ms:.0f} ms")


def test_one_transaction_shows_whole_and_the_page_never_reloaded(page: Page,
                                                                  shop: OrdersSystem):  # fmt: skip
    """Three orders shipped in one transaction enter the shipped lane together: the source
    never splits a transaction between micro-batches, and a batch's changes to one key reach
    the page as one delta."""
    shop.sql("UPDATE orders SET status = 'shipped' WHERE customer = 'grace' OR id IN (5, 6)")
    expect(order(page, "lane-shipped", 6)).to_have_count(1, timeout=SHOWN_WITHIN_MS)
    assert {3, 4, 5, 6} <= set(ids(page, "lane-shipped"))  # at once, not waited for
    for lane, gone in (("lane-open", 3), ("lane-open", 6), ("lane-paid", 5)):
        expect(order(page, lane, gone)).to_have_count(0)
    assert page.evaluate("() => window.__sameDocument === true")
