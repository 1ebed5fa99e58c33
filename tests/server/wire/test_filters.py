"""The filter grammar (``server/wire/filters.py``) against the examples of protocol/filters.json,
its limits, the digest that names a filter in event ids, and, on random filters and rows, the
compiled predicate against a reference read straight from docs/PROTOCOL.md, section 5.2."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from liveviews.gateway.errors import BadRequest
from liveviews.gateway.wire import filters

EXAMPLES = json.loads(
    (Path(__file__).resolve().parents[3] / "protocol" / "filters.json").read_text()
)


def refusal(value: Any) -> BadRequest:
    with pytest.raises(BadRequest) as info:
        filters.parse(value)
    assert info.value.code == "invalid_filter"
    assert info.value.status == 400
    return info.value


@pytest.mark.parametrize("case", EXAMPLES["cases"], ids=lambda c: json.dumps(c["filter"]))
def test_the_documented_examples_match_what_they_say(case: dict[str, Any]) -> None:
    checked = filters.parse(case["filter"])
    for row in case["match"]:
        assert checked.matches(row), row
    for row in case["miss"]:
        assert not checked.matches(row), row
    # The same filter as an SSE parameter's text.
    assert filters.parse_json(json.dumps(case["filter"])).digest == checked.digest


@pytest.mark.parametrize("case", EXAMPLES["refused"], ids=lambda c: json.dumps(c["filter"]))
def test_malformed_filters_are_refused_with_the_place_named(case: dict[str, Any]) -> None:
    error = refusal(case["filter"])
    assert error.message.startswith(case["at"] + ": "), error.message
    assert "Traceback" not in error.message and len(error.message) < 300


def test_limits_are_refused_with_a_sentence() -> None:
    leaf = {"field": "a", "eq": 1}
    assert "64 objects" in refusal({"or": [leaf] * 31 + [{"and": [leaf] * 32}]}).message
    deep: Any = leaf
    for _ in range(7):
        deep = {"not": deep}
    filters.parse(deep)  # eight deep
    assert "8 objects deep" in refusal({"not": deep}).message
    assert "1 to 32" in refusal({"and": [leaf] * 33}).message
    assert "1 to 100" in refusal({"field": "a", "in": list(range(101))}).message
    filters.parse({"field": "a", "in": list(range(100))})
    assert "256 characters" in refusal({"field": "a", "eq": "x" * 257}).message
    assert "4096 bytes" in refusal({"field": "a", "in": ["y" * 200] * 30}).message
    with pytest.raises(BadRequest) as info:
        filters.parse_json("{'field': 'a'}")
    assert info.value.code == "invalid_filter" and "not JSON" in info.value.message
    with pytest.raises(BadRequest):
        filters.parse_json('{"field": "a", "eq": "' + "z" * 5000 + '"}')


def test_the_digest_is_of_the_meaning_not_the_text() -> None:
    one = filters.parse_json('{"field": "a", "in": [2, 1.0, "x"]}')
    two = filters.parse_json('{"in": ["x", 1, 2.0], "field": ["a"]}')
    assert one.digest == two.digest and len(one.digest) == 16
    a, b = {"field": "a", "eq": 1}, {"field": "b", "null": True}
    assert filters.parse({"or": [a, b]}).digest == filters.parse({"or": [b, a]}).digest
    assert filters.parse({"or": [a, b]}).digest != filters.parse({"and": [a, b]}).digest
    assert one.digest != filters.parse({"field": "a", "in": [2, 1, "y"]}).digest
    assert (
        filters.parse({"field": "a", "eq": True}).digest
        != filters.parse({"field": "a", "eq": 1}).digest
    )


# A reference evaluator, written from the protocol's table as directly as possible.


def reference(f: dict[str, Any], row: Any) -> bool:
    if "and" in f:
        return all(reference(g, row) for g in f["and"])
    if "or" in f:
        return any(reference(g, row) for g in f["or"])
    if "not" in f:
        return not reference(f["not"], row)
    path = f["field"] if isinstance(f["field"], list) else [f["field"]]
    value = row
    for name in path:
        value = value.get(name) if isinstance(value, dict) else None
    present = value is not None
    op = next(k for k in f if k != "field")
    operand = f[op]

    def same(a: Any, b: Any) -> bool:
        if isinstance(a, bool) or isinstance(b, bool):
            return isinstance(a, bool) and isinstance(b, bool) and a == b
        if isinstance(a, int | float) and isinstance(b, int | float):
            return math.isfinite(a) and float(a) == float(b)
        return isinstance(a, str) and isinstance(b, str) and a == b

    if op == "null":
        return (not present) is operand
    if op == "eq":
        return present and same(value, operand)
    if op == "ne":
        return present and not same(value, operand)
    if op == "in":
        return present and any(same(value, v) for v in operand)
    numbers = all(isinstance(x, int | float) and not isinstance(x, bool) for x in (value, operand))
    strings = isinstance(value, str) and isinstance(operand, str)
    if not present or not (numbers or strings):
        return False
    return {"lt": value < operand, "lte": value <= operand, "gt": value > operand,
            "gte": value >= operand}[op]  # fmt: skip


FIELDS = st.sampled_from(["a", "b", ["o", "a"]])
SCALARS = st.one_of(
    st.booleans(), st.integers(-3, 3), st.floats(-3, 3, allow_nan=False), st.sampled_from("xyz")
)
COMPARISON = st.one_of(
    st.builds(lambda f, op, v: {"field": f, op: v}, FIELDS, st.sampled_from(["eq", "ne"]), SCALARS),
    st.builds(
        lambda f, op, v: {"field": f, op: v},
        FIELDS,
        st.sampled_from(["lt", "lte", "gt", "gte"]),
        st.one_of(st.integers(-3, 3), st.sampled_from("xyz")),
    ),
    st.builds(
        lambda f, v: {"field": f, "in": v}, FIELDS, st.lists(SCALARS, min_size=1, max_size=4)
    ),
    st.builds(lambda f, v: {"field": f, "null": v}, FIELDS, st.booleans()),
)
FILTERS = st.recursive(
    COMPARISON,
    lambda inner: st.one_of(
        st.builds(lambda fs: {"and": fs}, st.lists(inner, min_size=1, max_size=3)),
        st.builds(lambda fs: {"or": fs}, st.lists(inner, min_size=1, max_size=3)),
        st.builds(lambda f: {"not": f}, inner),
    ),
    max_leaves=8,
)
VALUES = st.one_of(st.none(), SCALARS, st.lists(SCALARS, max_size=1))
ROWS = st.one_of(
    st.fixed_dictionaries(
        {},
        optional={
            "a": VALUES,
            "b": VALUES,
            "o": st.one_of(VALUES, st.fixed_dictionaries({}, optional={"a": VALUES})),
        },
    ),  # fmt: skip
    SCALARS,
    st.none(),
)


@settings(max_examples=int(os.environ.get("LV_FUZZ_EXAMPLES", "300")), deadline=None)
@given(FILTERS, st.lists(ROWS, min_size=1, max_size=8))
def test_compiled_filters_agree_with_the_reference(f: dict[str, Any], rows: list[Any]) -> None:
    try:
        checked = filters.parse(f)
    except BadRequest:
        depth_or_size = len(orjson.dumps(f)) > filters.MAX_BYTES
        assert depth_or_size or _depth(f) > filters.MAX_DEPTH or _nodes(f) > filters.MAX_NODES
        return
    for row in rows:
        # As the store hands it over: decoded JSON.
        decoded = orjson.loads(orjson.dumps(row))
        assert checked.matches(decoded) == reference(f, decoded), (f, decoded)


def _depth(f: Any) -> int:
    kids = f.get("and") or f.get("or") or ([f["not"]] if "not" in f else [])
    return 1 + max((_depth(k) for k in kids), default=0)


def _nodes(f: Any) -> int:
    kids = f.get("and") or f.get("or") or ([f["not"]] if "not" in f else [])
    return 1 + sum(_nodes(k) for k in kids)
