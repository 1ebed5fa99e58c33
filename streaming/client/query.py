"""What a subscription follows (docs/PROTOCOL.md, sections 5 and 5.1): one key, the keys of a
view that start with a prefix (the empty prefix: the whole view), or a window of a key's top
rows by score, optionally the page after a row. Checked once, when the application subscribes,
so a mistake is a ValueError saying what to change rather than a refusal later."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from liveviews.client.frames import Shape


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
) -> Query:
    if not isinstance(view, str) or not view:
        raise ValueError("a subscription's view must be a non-empty string")
    if prefix is not None:
        if key is not None:
            raise ValueError("subscribe to a key or to a prefix, not both")
        if limit is not None or after is not None:
            raise ValueError("a window (limit, after) is of one key, not of a prefix")
        if not isinstance(prefix, str):
            raise ValueError("a prefix must be a string (empty: the whole view)")
        return Query("prefix", view, prefix=prefix)
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
