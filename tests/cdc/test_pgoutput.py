"""The pgoutput reader on messages a real PostgreSQL 15 sent (golden/README.md: the SQL), and
the conversion of their column values to JSON."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from liveviews.cdc.pgoutput import (
    Begin,
    Commit,
    DecodeError,
    Delete,
    Insert,
    Message,
    Relation,
    Truncate,
    Update,
    decode,
    lsn_text,
    parse_lsn,
)
from liveviews.cdc.values import BadValue, to_json

GOLDEN = Path(__file__).parent / "golden" / "pgoutput.b64"


def messages() -> list[Message]:
    return [decode(base64.b64decode(line)) for line in GOLDEN.read_text().split()]


def test_transactions_are_framed_by_begin_and_commit_at_one_position() -> None:
    ms = messages()
    begins = [m for m in ms if isinstance(m, Begin)]
    commits = [m for m in ms if isinstance(m, Commit)]
    assert len(begins) == len(commits) == 8
    for begin, commit in zip(begins, commits, strict=True):
        assert begin.final_lsn == commit.commit_lsn < commit.end_lsn
        assert begin.commit_time_ms == commit.commit_time_ms
    assert [c.commit_lsn for c in commits] == sorted(c.commit_lsn for c in commits)
    assert len({b.xid for b in begins}) == 8
    # 2026-11-24, when they were captured: PostgreSQL's epoch (2000) is moved to 1970's.
    assert 1795478400000 <= begins[0].commit_time_ms < 1795564800000


def test_relation_names_columns_types_and_key() -> None:
    orders = next(m for m in messages() if isinstance(m, Relation) and m.name == "orders")
    assert orders.namespace == "public" and orders.replica_identity == "d"
    assert [(c.name, c.type_oid, c.is_key) for c in orders.columns] == [
        ("id", 20, True), ("customer", 25, False), ("total", 1700, False), ("paid", 16, False),
        ("at", 1184, False), ("doc", 3802, False), ("score", 701, False),
    ]  # fmt: skip
    notes = next(m for m in messages() if isinstance(m, Relation) and m.name == "notes")
    assert notes.replica_identity == "f" and all(c.is_key for c in notes.columns)


def test_rows_of_inserts_updates_deletes_and_truncate() -> None:
    ms = messages()
    inserts = [m for m in ms if isinstance(m, Insert)]
    assert inserts[0].new == (
        ("t", "1"), ("t", "ann"), ("t", "12.50"), ("t", "t"),
        ("t", "2026-11-24 14:41:17.123+00"), ("t", '{"a": [1, 2]}'), ("t", "0.5"),
    )  # fmt: skip
    assert inserts[1].new[2:] == (("n", None),) * 5
    updates = [m for m in ms if isinstance(m, Update)]
    assert updates[0].old is None and updates[0].new[2] == ("t", "13.00")  # key unchanged
    assert updates[1].old_is_key and updates[1].old[0] == ("t", "2")  # type: ignore[index]
    assert updates[1].new[0] == ("t", "3")
    assert not updates[2].old_is_key and updates[2].old == (("t", "7"), ("t", "hi"))  # full
    deletes = [m for m in ms if isinstance(m, Delete)]
    assert deletes[0].old_is_key and deletes[0].old[0] == ("t", "3")
    assert not deletes[1].old_is_key and deletes[1].old == (("t", "7"), ("t", "ho"))
    (truncate,) = [m for m in ms if isinstance(m, Truncate)]
    notes = next(m for m in ms if isinstance(m, Relation) and m.name == "notes")
    assert truncate.relation_ids == (notes.relation_id,)


def test_cut_or_unknown_bytes() -> None:
    whole = base64.b64decode(GOLDEN.read_text().split()[2])
    with pytest.raises(DecodeError):
        decode(whole[:-3])
    with pytest.raises(DecodeError):
        decode(b"")
    assert decode(b"M\x00").tag == "M"  # type: ignore[union-attr]


def test_positions_read_and_written_as_postgresql_does() -> None:
    assert lsn_text(parse_lsn("0/16B3748")) == "0/16B3748"
    assert parse_lsn("1/0") == 1 << 32
    with pytest.raises(ValueError):
        parse_lsn("16B3748")


@pytest.mark.parametrize(
    ("oid", "text", "value"),
    [
        (20, "9007199254740993", 9007199254740993),
        (16, "t", True),
        (16, "false", False),
        (1700, "12.50", "12.50"),
        (701, "0.5", 0.5),
        (3802, '{"a": [1, 2]}', {"a": [1, 2]}),
        (1184, "2026-11-24 16:41:17.5+02", "2026-11-24T14:41:17.500000Z"),
        (1114, "2026-11-24 14:41:17", "2026-11-24T14:41:17"),
        (25, "plain", "plain"),
        (25, None, None),
    ],
)
def test_values_by_type(oid: int, text: str | None, value: object) -> None:
    assert to_json(oid, text) == value


def test_a_float_json_cannot_hold_is_refused() -> None:
    with pytest.raises(BadValue, match="finite"):
        to_json(701, "NaN")
