"""What stops change data capture for a person (exit status 2, one sentence, nothing of the
transaction appended), and a plain restart, which resumes where the log is."""

from __future__ import annotations

from pathlib import Path

import psycopg2.extensions
import pytest
import redis

from liveviews.cdc.position import position_key
from tests.cdc import shop
from tests.cdc.harness import CdcProcess, execute, logged, recompute, table_rows, wait_for

APP = "tests.cdc.shop:app"
NEEDS_A_PERSON = 2


@pytest.fixture()
def cdc(store: redis.Redis, store_url: str, database: str, tmp_path: Path) -> CdcProcess:
    execute(database, shop.SCHEMA, "INSERT INTO orders VALUES (1, 'ann', 'new', 1, NULL)")
    return CdcProcess(store_url, database, tmp_path, APP)


def started(cdc: CdcProcess, store: redis.Redis) -> None:
    cdc.start()
    wait_for(lambda: store.exists(position_key("liveviews")) == 1, 30, "the snapshot")


def stopped_with(cdc: CdcProcess, sentence: str) -> None:
    assert cdc.wait(30) == NEEDS_A_PERSON, cdc.text()
    assert sentence in cdc.text()


def test_a_dropped_declared_column_stops_before_its_transaction(
    cdc: CdcProcess, store: redis.Redis, database: str
) -> None:
    started(cdc, store)
    before = len(logged(store))
    execute(database, "ALTER TABLE orders DROP COLUMN status")
    execute(database, "INSERT INTO items VALUES (1, 1, 'tea', 1)",
            "INSERT INTO orders VALUES (2, 'bob', 3)")  # fmt: skip
    stopped_with(cdc, "column 'status' of public.orders is gone (dropped or renamed) but is "
                      "declared: remove it from the table's declaration")  # fmt: skip
    assert len(logged(store)) == before  # not even the transaction's item


def test_a_type_change_the_declaration_cannot_hold_stops(
    cdc: CdcProcess, store: redis.Redis, database: str
) -> None:
    started(cdc, store)
    execute(database, "ALTER TABLE items ALTER COLUMN qty TYPE text",
            "INSERT INTO items VALUES (1, 1, 'tea', 'two')")  # fmt: skip
    stopped_with(cdc, "column 'qty' of public.items is of type text, which the declared "
                      "Integer() cannot hold: declare it as String()")  # fmt: skip


def test_a_row_that_fails_the_declaration_stops_naming_row_and_column(
    cdc: CdcProcess, store: redis.Redis, database: str
) -> None:
    started(cdc, store)
    execute(database, "INSERT INTO orders VALUES (5, 'cy', '', NULL, NULL)")
    stopped_with(cdc, "the row of public.orders with key {'id': 5}, column 'status' does not "
                      "fit the declaration")  # fmt: skip


def test_truncate_stops(cdc: CdcProcess, store: redis.Redis, database: str) -> None:
    started(cdc, store)
    execute(database, "TRUNCATE orders")
    stopped_with(cdc, "TRUNCATE public.orders removed rows without saying which")


@pytest.mark.parametrize(
    ("sql", "sentence"),
    [
        ("ALTER TABLE orders REPLICA IDENTITY DEFAULT",
         "run ALTER TABLE public.orders REPLICA IDENTITY FULL"),
        ("ALTER TABLE items DROP CONSTRAINT items_pkey; ALTER TABLE items ADD PRIMARY KEY (order_id)",
         "public.items has order_id, but its declaration says key=('order_id', 'line')"),
        ("DROP TABLE items", "the database has no table public.items"),
    ],
)  # fmt: skip
def test_a_database_that_does_not_match_the_declaration_stops_at_start(
    cdc: CdcProcess, store: redis.Redis, database: str, sql: str, sentence: str
) -> None:
    execute(database, sql)
    cdc.start()
    stopped_with(cdc, sentence)
    assert logged(store) == [] and not store.exists(position_key("liveviews"))


def test_a_stored_position_without_its_slot_stops(
    cdc: CdcProcess, store: redis.Redis, database: str
) -> None:
    started(cdc, store)
    assert cdc.stop() == 0
    execute(database, "SELECT pg_drop_replication_slot('liveviews')")
    cdc.start()
    stopped_with(cdc, "but the database has no replication slot 'liveviews' to go on from")


def test_a_restart_resumes_with_nothing_lost_or_doubled(
    cdc: CdcProcess, store: redis.Redis, database: str
) -> None:
    started(cdc, store)
    execute(database, "INSERT INTO orders VALUES (2, 'bob', 'new', 2, NULL)")
    wait_for(lambda: len(logged(store)) == 2, 30, "the first change")
    assert cdc.stop() == 0
    execute(database, "UPDATE orders SET status = 'paid'", "DELETE FROM orders WHERE id = 1")
    execute(database, "INSERT INTO items VALUES (2, 1, 'pot', 1)")
    cdc.start()
    wait_for(lambda: len(logged(store)) == 6, 30, "the changes made while it was down")
    assert "resuming after" in cdc.text()
    assert recompute(logged(store), shop.app)["orders"] == table_rows(database, shop.orders)
    assert cdc.stop() == 0


def test_a_snapshot_that_never_reached_the_log_is_taken_again(
    cdc: CdcProcess, store: redis.Redis, database: str
) -> None:
    """What a crash between making the slot and appending the snapshot leaves: a slot, and
    nothing in the store. The start drops the slot and takes the snapshot once."""
    execute(database, "SELECT pg_create_logical_replication_slot('liveviews', 'pgoutput')")
    execute(database, "INSERT INTO orders VALUES (2, 'bob', 'new', 2, NULL)")
    started(cdc, store)
    assert "taking the snapshot again" in cdc.text()
    events = logged(store)
    assert sorted(e["payload"]["id"] for e in events) == [1, 2]
    assert {e["tx_events"] for e in events} == {2}
    execute(database, "UPDATE orders SET status = 'paid' WHERE id = 2")
    wait_for(lambda: len(logged(store)) == 3, 30, "the change after the snapshot")
    assert recompute(logged(store), shop.app)["orders"] == table_rows(database, shop.orders)
    assert cdc.stop() == 0


@pytest.mark.parametrize(
    ("role", "owns", "sentence"),
    [
        ("LOGIN", True, "ALTER ROLE {user} REPLICATION, or use a user that has it"),
        ("LOGIN REPLICATION", False, "it needs CREATE on the database and to own the declared"),
    ],
)
def test_a_user_without_the_rights_it_needs_stops_at_start(
    store: redis.Redis, store_url: str, database: str, tmp_path: Path,
    role: str, owns: bool, sentence: str,
) -> None:  # fmt: skip
    user = f"u_{tmp_path.name[-8:].lower().replace('-', '_')}"
    execute(database, shop.SCHEMA, f"CREATE ROLE {user} {role} PASSWORD 'secret'")
    if owns:
        dbname = psycopg2.extensions.parse_dsn(database)["dbname"]
        execute(database, f"ALTER TABLE orders OWNER TO {user}",
                f"ALTER TABLE items OWNER TO {user}",
                f"GRANT CREATE ON DATABASE {dbname} TO {user}")  # fmt: skip
    else:
        execute(database, f"GRANT SELECT ON orders, items TO {user}")
    try:
        dsn = psycopg2.extensions.make_dsn(database, user=user, password="secret")
        cdc = CdcProcess(store_url, dsn, tmp_path, APP).start()
        stopped_with(cdc, sentence.format(user=user))
        assert logged(store) == []
    finally:
        execute(database, f"DROP OWNED BY {user}", f"DROP ROLE {user}")
