"""Declaring a database table: the events it declares, the declarations refused with a
sentence, and the gateway refusing its events from clients."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest
import redis

from liveviews import App, ConfigurationError, Integer, InvalidEvent, Json, String
from liveviews.log.events import log_stream
from tests.cdc import shop
from tests.support.gateway import ServedGateway
from tests.support.gateway_settings import settings_for


def test_a_table_declares_three_unpublishable_event_types() -> None:
    assert set(shop.app.tables) == {"orders", "items"}
    orders = shop.app.tables["orders"]
    assert orders.qualified == "public.orders" and orders.needs_old_row
    for op in ("insert", "update", "delete"):
        assert not shop.app.event_types[f"orders_{op}"].publishable
    update = shop.app.event_types["orders_update"]
    row = {"id": 1, "customer": "ann", "status": "paid", "total": None, "old_key": {"id": 1}}
    assert update.partition_key(update.schema.validate(row)) == "ann"
    with pytest.raises(InvalidEvent, match="key columns id"):
        update.schema.validate({**row, "old_key": {"order": 1}})
    delete = shop.app.event_types["items_delete"]
    assert delete.partition_key({"old_key": {"order_id": 4, "line": 2}}) == "4:2"


def test_a_schema_other_than_public() -> None:
    table = App("a").table("sales.orders", columns={"id": Integer()}, key="id")
    assert (table.schema, table.name, table.qualified) == ("sales", "orders", "sales.orders")


BAD: list[tuple[str, dict[str, Any], str]] = [
    ("Orders", {"columns": {"id": Integer()}, "key": ("id",)}, "lowercase letters"),
    ("orders", {"columns": {"id": Integer(), "old_key": Json()}, "key": ("id",)},
     "may not be named 'old_key'"),
    ("orders", {"columns": {"id": Integer()}, "key": ("nr",)}, "'nr' is not a declared column"),
    ("orders", {"columns": {"id": Integer()}, "key": ()}, "primary-key columns"),
    ("orders", {"columns": {"id": Integer(optional=True)}, "key": ("id",)}, "cannot be optional"),
    ("orders", {"columns": {"id": Integer(), "doc": Json()}, "key": ("id",),
                "partition_by": "doc"}, r"must be an Integer\(\) or a String\(\)"),
    ("orders", {"columns": {"id": Integer()}, "key": ("id",), "partition_by": "who"},
     "'who' is not a declared column"),
    ("orders", {"columns": {"id": int}, "key": ("id",)}, "must be a field type"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "kwargs", "says"), BAD)
def test_refused_declarations_say_what_to_change(
    name: str, kwargs: dict[str, Any], says: str
) -> None:
    with pytest.raises(ConfigurationError, match=says):
        App("a").table(name, **kwargs)


def test_a_table_whose_event_type_exists_is_refused() -> None:
    app = App("a")
    app.table("orders", columns={"id": Integer()}, key="id")
    with pytest.raises(ConfigurationError, match="declared twice"):
        app.table("orders", columns={"id": Integer(), "x": String()}, key="id")
    other = App("b")
    other.event_type("items_update", shop.app.event_types["items_update"].schema, str)
    with pytest.raises(ConfigurationError, match="'items_update' is declared twice"):
        other.table("items", columns={"id": Integer()}, key="id")
    assert "items" not in other.tables and "items_insert" not in other.event_types


@pytest.fixture()
def gateway(store: redis.Redis, store_url: str) -> Iterator[ServedGateway]:
    served = ServedGateway(settings_for(store_url, LV_APP="tests.cdc.shop:app")).start()
    yield served
    served.stop()


def test_clients_cannot_publish_a_tables_events(gateway: ServedGateway, store: redis.Redis) -> None:
    event = {"type": "orders_insert",
             "payload": {"id": 1, "customer": "ann", "status": "new", "total": "1.00"}}  # fmt: skip

    async def post() -> tuple[int, Any]:
        async with aiohttp.ClientSession() as s:
            resp = await s.post(gateway.url + "/v1/events", json=[event],
                                headers=gateway.headers("ann"))  # fmt: skip
            return resp.status, await resp.json()

    status, answer = asyncio.run(post())
    assert status == 403
    assert answer["code"] == "not_publishable" and answer["index"] == 0
    assert "come from the database" in answer["message"]
    assert sum(store.xlen(log_stream(p)) for p in range(4)) == 0
