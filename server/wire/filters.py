"""Filters of a prefix subscription (docs/PROTOCOL.md, section 5.2): the JSON grammar, read and
checked once when a subscription starts, then compiled to a predicate on a row's value.

The predicate is a tree of closures rather than an interpreter walking the JSON: a filtered
subscription runs it on every row change of its keys, and the closures do no dispatch on the
operator's name per row.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from liveviews.gateway.errors import BadRequest

MAX_NODES = 64
MAX_DEPTH = 8
MAX_BYTES = 4096
MAX_OPERANDS = 32
MAX_IN = 100
MAX_FIELD = 64
MAX_PATH = 8
MAX_STRING = 256

COMPARISONS = ("eq", "ne", "in", "lt", "lte", "gt", "gte", "null")
CONNECTIVES = ("and", "or", "not")

Predicate = Callable[[Any], bool]
"""Does a row's value (decoded JSON) match?"""

_ABSENT = object()


@dataclass(frozen=True)
class Filter:
    """A checked filter: ``matches`` a row's value; ``digest`` names its meaning in event ids."""

    matches: Predicate
    digest: str
    canonical: Any
    """The filter as parsed (numbers as floats, the values of ``in`` and the operands of
    ``and`` and ``or`` sorted): what ``digest`` is of, so that two texts of one filter resume
    each other's ids."""


def invalid(where: str, sentence: str) -> BadRequest:
    return BadRequest(f"{where}: {sentence}", code="invalid_filter")


def parse_json(raw: str) -> Filter:
    """A filter from its JSON text (an SSE request's ``filter`` parameter)."""
    if len(raw.encode()) > MAX_BYTES:
        raise invalid("filter", f"a filter's JSON is at most {MAX_BYTES} bytes; ask for less.")
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise invalid("filter", "it is not JSON; send the filter object's JSON, "
                      "percent-encoded in the query string.") from None  # fmt: skip
    return parse(value, checked_size=True)


def parse(value: Any, *, checked_size: bool = False) -> Filter:
    """A filter from its decoded JSON (a WebSocket ``subscribe``'s ``filter``)."""
    if not checked_size and len(orjson.dumps(value)) > MAX_BYTES:
        raise invalid("filter", f"a filter's JSON is at most {MAX_BYTES} bytes; ask for less.")
    reader = _Reader()
    matches, canonical = reader.node(value, "filter", 1)
    return Filter(matches, hashlib.sha256(_text(canonical)).hexdigest()[:16], canonical)


class _Reader:
    """Reads one filter, counting its objects against ``MAX_NODES``."""

    def __init__(self) -> None:
        self.nodes = 0

    def node(self, value: Any, where: str, depth: int) -> tuple[Predicate, Any]:
        if not isinstance(value, dict):
            raise invalid(where, "a filter is a JSON object: a comparison such as "
                          '{"field": "status", "eq": "open"}, or "and", "or", "not".')  # fmt: skip
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise invalid(where, f"a filter has at most {MAX_NODES} objects; ask for less.")
        if depth > MAX_DEPTH:
            raise invalid(where, f"a filter is at most {MAX_DEPTH} objects deep.")
        if "field" in value:
            return self.comparison(value, where)
        names = [n for n in value if n in CONNECTIVES]
        others = [n for n in value if n not in CONNECTIVES]
        if len(names) != 1 or others:
            raise invalid(where, "an object of a filter is a comparison (with 'field' and one "
                          f"of {', '.join(COMPARISONS)}) or has exactly one of 'and', 'or', "
                          f"'not'; found {_names(value)}.")  # fmt: skip
        name = names[0]
        at = f"{where}.{name}"
        if name == "not":
            inner, canonical = self.node(value["not"], at, depth + 1)
            return (lambda row: not inner(row)), {"not": canonical}
        operands = value[name]
        if not isinstance(operands, list) or not 1 <= len(operands) <= MAX_OPERANDS:
            raise invalid(at, f"'{name}' takes a list of 1 to {MAX_OPERANDS} filters.")
        parts = [self.node(op, f"{at}[{i}]", depth + 1) for i, op in enumerate(operands)]
        predicates = tuple(p for p, _ in parts)
        # "and" and "or" do not depend on their order, so neither does the digest.
        canonicals = sorted((c for _, c in parts), key=_text)
        if len(predicates) == 1:
            return predicates[0], {name: canonicals}
        if name == "and":
            return (lambda row: all(p(row) for p in predicates)), {"and": canonicals}
        return (lambda row: any(p(row) for p in predicates)), {"or": canonicals}

    def comparison(self, value: dict[str, Any], where: str) -> tuple[Predicate, Any]:
        ops = [n for n in value if n != "field"]
        if len(ops) != 1 or ops[0] not in COMPARISONS:
            raise invalid(where, "a comparison has 'field' and exactly one operator of "
                          f"{', '.join(COMPARISONS)}; found {_names(value)}.")  # fmt: skip
        op = ops[0]
        path = _path(value["field"], f"{where}.field")
        get = _getter(path)
        operand = value[op]
        at = f"{where}.{op}"
        canonical: dict[str, Any] = {"field": list(path)}
        if op == "null":
            if not isinstance(operand, bool):
                raise invalid(at, "'null' takes true (the field is absent or null) or false.")
            canonical["null"] = operand
            if operand:
                return (lambda row: get(row) is _ABSENT), canonical
            return (lambda row: get(row) is not _ABSENT), canonical
        if op == "in":
            if not isinstance(operand, list) or not 1 <= len(operand) <= MAX_IN:
                raise invalid(at, f"'in' takes a list of 1 to {MAX_IN} values.")
            keys = frozenset(_scalar(v, f"{at}[{i}]") for i, v in enumerate(operand))
            canonical["in"] = sorted(keys, key=_order)
            return (lambda row: _key_of(get(row)) in keys), canonical
        key = _scalar(operand, at)
        canonical[op] = key[1]
        if op == "eq":
            return (lambda row: _key_of(get(row)) == key), canonical
        if op == "ne":

            def ne(row: Any) -> bool:
                found = get(row)
                return found is not _ABSENT and _key_of(found) != key

            return ne, canonical
        kind, bound = key
        if kind == "b":
            raise invalid(at, f"'{op}' compares with a number or a string, not a boolean.")
        test = _ORDERS[op]

        def ordered(row: Any) -> bool:
            found = _key_of(get(row))
            return found is not None and found[0] == kind and test(found[1], bound)

        return ordered, canonical


_ORDERS: dict[str, Callable[[Any, Any], bool]] = {
    "lt": lambda a, b: a < b,
    "lte": lambda a, b: a <= b,
    "gt": lambda a, b: a > b,
    "gte": lambda a, b: a >= b,
}


def _text(canonical: Any) -> bytes:
    return orjson.dumps(canonical, option=orjson.OPT_SORT_KEYS)


def _names(value: dict[str, Any]) -> str:
    return ", ".join(repr(n) for n in value) or "no member"


def _path(field: Any, where: str) -> tuple[str, ...]:
    names = [field] if isinstance(field, str) else field
    fits = isinstance(names, list) and 1 <= len(names) <= MAX_PATH
    if not fits or not all(isinstance(n, str) and 1 <= len(n) <= MAX_FIELD for n in names):
        raise invalid(
            where,
            f"'field' is a field's name (1 to {MAX_FIELD} characters) or a list of 1 to "
            f"{MAX_PATH} such names, a path into nested objects.",
        )
    return tuple(names)


def _getter(path: tuple[str, ...]) -> Callable[[Any], Any]:
    """The field's value in a row's value, or ``_ABSENT`` (which a null also reads as)."""
    if len(path) == 1:
        (name,) = path

        def get(row: Any) -> Any:
            if type(row) is not dict:
                return _ABSENT
            found = row.get(name)
            return _ABSENT if found is None else found

        return get

    def walk(row: Any) -> Any:
        for name in path:
            if type(row) is not dict:
                return _ABSENT
            row = row.get(name)
        return _ABSENT if row is None else row

    return walk


def _scalar(value: Any, where: str) -> tuple[str, Any]:
    """An operand as a comparable pair: its kind (number, string, boolean) and its value, so
    that ``True`` never equals ``1`` as it does in Python."""
    key = _key_of(value)
    if key is None or key[0] == "s" and len(value) > MAX_STRING:
        raise invalid(
            where,
            f"a value is a string of at most {MAX_STRING} characters, a finite number or a "
            'boolean; test for null with {"field": ..., "null": true}.',
        )
    return key


def _key_of(value: Any) -> tuple[str, Any] | None:
    """A row field's value as ``_scalar`` keys it; None for what no operand equals (absent,
    an object, a list, a non-finite number)."""
    kind = type(value)
    if kind is str:
        return ("s", value)
    if kind is bool:
        return ("b", value)
    if kind is int or kind is float:
        number = float(value)
        return ("n", number) if math.isfinite(number) else None
    return None


def _order(key: tuple[str, Any]) -> tuple[str, str]:
    return key[0], repr(key[1])
