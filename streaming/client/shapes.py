"""The subscriptions of section 5.1 of docs/PROTOCOL.md: a prefix's keys, and a window of a key's
top rows. Each keeps its own contents in the state machine of ``subscription.py``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from liveviews.client.errors import ProtocolError
from liveviews.client.query import Cursor
from liveviews.client.subscription import Subscription, _record
from liveviews.client.types import Json, Rows


class PrefixSubscription(Subscription):
    """The keys of a view that start with ``prefix`` (the empty prefix: every key); with a
    ``filter``, only their rows that match it (docs/PROTOCOL.md, section 5.2).

    ``keys`` maps each key to its rows: a key appears with its first row and is dropped with its
    last. Each delta is one key's, and the change says which (``change.key``). Under a filter a
    row that stops matching comes as a delete (it moves out), one that starts to as an upsert. A
    delete of a row the subscription does not hold, which a resumed filtered prefix may be sent,
    changes nothing; its change still comes, with the delta's ops as the gateway sent them."""

    def _empty(self) -> None:
        self.key = None
        self.prefix = self.query.prefix or ""
        self._keys: dict[str, Rows] = {}

    @property
    def filter(self) -> Mapping[str, Json] | None:
        """The filter the rows match, as given (read-only); None: every row of the keys."""
        return None if self.query.filter is None else MappingProxyType(self.query.filter)

    @property
    def keys(self) -> Mapping[str, Mapping[str, Json]]:
        """Each key's rows now, read-only."""
        return MappingProxyType({k: MappingProxyType(r) for k, r in self._keys.items()})

    @property
    def rows(self) -> Mapping[str, Json]:
        raise AttributeError("a prefix subscription keeps its rows per key: use sub.keys")

    def _apply_snapshot(self, data: dict[str, Any]) -> Mapping[str, Any]:
        self._keys = {key: dict(rows) for key, rows in data["keys"].items()}
        return self._contents()

    def _apply_delta(self, data: dict[str, Any]) -> None:
        key = data["key"]
        if not key.startswith(self.prefix):
            raise ProtocolError(
                f"a subscription to the prefix {self.prefix!r} got a delta of {key!r}"
            )
        rows = self._keys.setdefault(key, {})
        for op in data["ops"]:
            if op["op"] == "upsert":
                rows[op["row"]] = op["value"]
            else:
                rows.pop(op["row"], None)  # a row it never held: nothing to do
        if not rows:
            del self._keys[key]

    def _contents(self) -> Mapping[str, Any]:
        return {key: dict(rows) for key, rows in self._keys.items()}

    def _records(self) -> tuple[list[dict[str, Any]], list[str]]:
        records = [
            _record({"key": k, "row": r}, v)
            for k, rows in self._keys.items()
            for r, v in rows.items()
        ]
        return records, ["key", "row"]


@dataclass(frozen=True)
class Ranked:
    """A row of a window, in the window's order."""

    row: str
    score: float
    value: Json


class WindowSubscription(Subscription):
    """The ``limit`` rows of highest score of a key, or the page after the row ``after``.

    ``rows`` and ``scores`` map row id -> value and -> score; ``ranked`` is the same rows in the
    window's order: score descending, ties by row id descending (code point order, which is the
    gateway's UTF-8 byte order). A delete of a row the window does not hold changes nothing."""

    def _empty(self) -> None:
        self.key = self.query.key
        self.limit = self.query.limit or 0
        self.after = self.query.after
        self._rows: Rows = {}
        self._scores: dict[str, float] = {}
        self.ranked: list[Ranked] = []

    @property
    def scores(self) -> Mapping[str, float]:
        return MappingProxyType(self._scores)

    def next_page(self) -> Cursor | None:
        """The cursor of the page after this one, to subscribe with as ``after``; None while the
        window is not full (there is no next page, or no snapshot yet)."""
        if len(self.ranked) < self.limit:
            return None
        last = self.ranked[-1]
        return Cursor(last.score, last.row)

    def _rank(self) -> None:
        # A window holds at most its view's limit of rows: sorting it again is cheap and plain.
        entries = (Ranked(row, self._scores[row], value) for row, value in self._rows.items())
        self.ranked = sorted(entries, key=lambda e: (e.score, e.row), reverse=True)

    def _apply_snapshot(self, data: dict[str, Any]) -> Mapping[str, Any]:
        self._rows = dict(data["rows"])
        self._scores = {row: float(data["scores"][row]) for row in self._rows}
        self._rank()
        return dict(self._rows)

    def _apply_delta(self, data: dict[str, Any]) -> None:
        for op in data["ops"]:
            if op["op"] == "upsert":
                if "score" not in op:
                    raise ProtocolError(
                        f"a window's upsert must carry its row's score ({op['row']!r})"
                    )
                self._rows[op["row"]] = op["value"]
                self._scores[op["row"]] = float(op["score"])
            else:
                self._rows.pop(op["row"], None)
                self._scores.pop(op["row"], None)
        self._rank()

    def _records(self) -> tuple[list[dict[str, Any]], list[str]]:
        return [_record({"row": e.row, "score": e.score}, e.value) for e in self.ranked], ["row"]
