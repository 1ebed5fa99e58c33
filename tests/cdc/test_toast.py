"""An update that leaves a large (TOASTed) value unchanged does not send it: with the old row
sent whole (REPLICA IDENTITY FULL) the value is taken from there; without, the process stops
with the sentence saying so, rather than append a row without it."""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest
import redis

from liveviews.cdc.position import position_key
from tests.cdc import notes
from tests.cdc.harness import CdcProcess, execute, logged, wait_for

BIG = secrets.token_hex(20_000)  # 40,000 characters that do not compress: stored out of line


@pytest.mark.parametrize("full", [True, False])
def test_an_unchanged_large_value(
    store: redis.Redis, store_url: str, database: str, tmp_path: Path, full: bool
) -> None:
    execute(database, notes.SCHEMA, ("INSERT INTO notes VALUES (1, 'a', %s)", (BIG,)))
    if full:
        execute(database, "ALTER TABLE notes REPLICA IDENTITY FULL")
    cdc = CdcProcess(store_url, database, tmp_path, "tests.cdc.notes:app").start()
    try:
        wait_for(lambda: store.exists(position_key("liveviews")) == 1, 30, "the snapshot")
        execute(database, "UPDATE notes SET title = 'b'")
        if full:
            wait_for(lambda: len(logged(store)) == 2, 30, "the update")
            update = logged(store)[-1]["payload"]
            assert update == {"id": 1, "title": "b", "body": BIG, "old_key": {"id": 1}}
        else:
            assert cdc.wait(30) == 2, cdc.text()
            assert "run ALTER TABLE public.notes REPLICA IDENTITY FULL" in cdc.text()
            assert len(logged(store)) == 1
    finally:
        cdc.stop()
