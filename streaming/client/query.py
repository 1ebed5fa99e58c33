"""What a subscription follows (docs/PROTOCOL.md, sections 5, 5.1 and 5.2): one key, the keys of
a view that start with a prefix (the empty prefix: the whole view), of which only the rows that
match a filter when it has one, or a window of a key's top rows by score, optionally the page
after a row. Checked once, when the application subscribes, so a mistake is a ValueError saying
what to change rather than a refusal later."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from liveviews.client.frames import Shape
from liveviews.client.types import Json


@dataclass(frozen=True)
class Cursor:
    """The row a page starts after: its score and its row id (``sub.next_page()``)."""

    score: float
    row: str


@dataclass(frozen=True)
class Query:
    shape: Shape
    view: str
    key: str | None = None
    prefix: str | None = None
    limit: int | None = None
    after: Cursor | None = None
    filter: dict[str, Json] | None = field(default=None, hash=False)
    """A prefix's filter (section 5.2): a copy of the one given, made when the application
    subscribed, so that changing its own dict later cannot change what a resume sends."""


def _json_copy(value: Any, where: str, within: tuple[int, ...]) -> Json:
    """A copy of ``value`` (at ``where`` in the filter), refused unless JSON carries it as it is:
    orjson would quietly write NaN as null, and a datetime or a dataclass as something else."""
    if value is None or isinstance(value, str | bool | int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{where} is {value}: a filter's numbers must be finite")
        return value
    if not isinstance(value, Mapping | list | tuple):
        raise ValueError(
            f"{where} is a {type(value).__name__}, which JSON does not carry: a filter holds "
            "strings, finite numbers, booleans, None, lists and dicts"
        )
    if id(value) in within:
        raise ValueError(f"{where} contains itself: a filter must be a tree of dicts and lists")
    inside = (*within, id(value))
    if isinstance(value, Mapping):
        for name in value:
            if not isinstance(name, str):
                raise ValueError(f"{where} has the key {name!r}: a filter's keys are strings")
        return {name: _json_copy(item, f"{where}.{name}", inside) for name, item in value.items()}
    return [_json_copy(item, f"{where}[{i}]", inside) for i, item in enumerate(value)]


def parse_filter(filter: Any) -> dict[str, Json]:
    """A filter (docs/PROTOCOL.md, section 5.2) as it goes to the gateway: a dict of JSON
    values, copied. Only its form is checked here; the gateway checks its grammar and limits,
    and refuses a wrong one with ``invalid_filter`` and a sentence naming the place."""
    if not isinstance(filter, Mapping):
        raise ValueError(
            "a filter is a dict such as {'field': 'assignee', 'eq': 'ada'} "
            f"(docs/PROTOCOL.md, section 5.2), not a {type(filter).__name__}"
        )
    copy = _json_copy(filter, "filter", ())
    assert isinstance(copy, dict)
    return copy


def _cursor(after: Any) -> Cursor:
    if isinstance(after, Cursor):
        return after
    if isinstance(after, tuple) and len(after) == 2:
        after = Cursor(*after)
        score_ok = isinstance(after.score, int | float) and math.isfinite(after.score)
        if score_ok and isinstance(after.row, str) and after.row:
            return Cursor(float(after.score), after.row)
    raise ValueError("after is the last row of the page before: sub.next_page(), or (score, row)")


def parse_query(
    view: str,
    key: str | None = None,
    *,
    prefix: str | None = None,
    limit: int | None = None,
    after: Any = None,
    filter: Any = None,
) -> Query:
    """The checked query; ``filter=None`` is no filter."""
    if not isinstance(view, str) or not view:
        raise ValueError("a subscription's view must be a non-empty string")
    if prefix is not None:
        if key is not None:
            raise ValueError("subscribe to a key or to a prefix, not both")
        if limit is not None or after is not None:
            raise ValueError("a window (limit, after) is of one key, not of a prefix")
        if not isinstance(prefix, str):
            raise ValueError("a prefix must be a string (empty: the whole view)")
        return Query("prefix", view, prefix=prefix, filter=_given(filter))
    if filter is not None:
        raise ValueError(
            "a filter narrows the rows of a prefix, not of one key or a window: "
            "subscribe(view, prefix=..., filter=...) instead (prefix='' for the whole view)"
        )
    if not isinstance(key, str) or not key:
        raise ValueError("subscribe(view, key) needs a non-empty key, or prefix=...")
    if limit is None:
        if after is not None:
            raise ValueError("after names the last row of a page: give the page size (limit) too")
        return Query("key", view, key=key)
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
        raise ValueError(
            f"a window's limit must be a whole number of rows, at least 1, not {limit!r}"
        )
    return Query(
        "window", view, key=key, limit=limit, after=None if after is None else _cursor(after)
    )


def _given(filter: Any) -> dict[str, Json] | None:
    return None if filter is None else parse_filter(filter)
