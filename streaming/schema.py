"""Declared payload schemas: what an event of a type must carry.

"A command may fail; an event is a fact": validation happens before anything reaches the log,
so the log only ever holds events that every view can rely on.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from liveviews.errors import InvalidEvent


@dataclass(frozen=True)
class String:
    """A text field, by default required and non-empty."""

    max_length: int = 1000
    min_length: int = 1
    pattern: str | None = None
    optional: bool = False

    def check(self, name: str, value: Any) -> Any:
        if not isinstance(value, str):
            raise InvalidEvent(f"field {name!r} must be a string.", code="wrong_type", field=name)
        if not self.min_length <= len(value) <= self.max_length:
            raise InvalidEvent(
                f"field {name!r} must be {self.min_length} to {self.max_length} characters long, "
                f"not {len(value)}.",
                code="invalid_field",
                field=name,
            )
        if self.pattern is not None and re.fullmatch(self.pattern, value) is None:
            raise InvalidEvent(
                f"field {name!r} must match {self.pattern}.", code="invalid_field", field=name
            )
        return value


@dataclass(frozen=True)
class Integer:
    minimum: int | None = None
    maximum: int | None = None
    optional: bool = False

    def check(self, name: str, value: Any) -> Any:
        if isinstance(value, bool) or not isinstance(value, int):
            raise InvalidEvent(f"field {name!r} must be an integer.", code="wrong_type", field=name)
        if (self.minimum is not None and value < self.minimum) or (
            self.maximum is not None and value > self.maximum
        ):
            raise InvalidEvent(
                f"field {name!r} must be between {self.minimum} and {self.maximum}.",
                code="invalid_field",
                field=name,
            )
        return value


@dataclass(frozen=True)
class Boolean:
    optional: bool = False

    def check(self, name: str, value: Any) -> Any:
        if not isinstance(value, bool):
            raise InvalidEvent(
                f"field {name!r} must be true or false.", code="wrong_type", field=name
            )
        return value


@dataclass(frozen=True)
class Float:
    """A number, whole or not; a database's ``real`` or ``double precision`` column."""

    optional: bool = False

    def check(self, name: str, value: Any) -> Any:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise InvalidEvent(f"field {name!r} must be a number.", code="wrong_type", field=name)
        return value


@dataclass(frozen=True)
class Json:
    """Any JSON value: a database's ``json`` or ``jsonb`` column, or a row's old key."""

    optional: bool = False

    def check(self, name: str, value: Any) -> Any:
        return value


FieldType = String | Integer | Boolean | Float | Json


@dataclass(frozen=True)
class Schema:
    """Named fields, none other allowed, plus an optional check across fields."""

    fields: Mapping[str, FieldType]
    check: Callable[[dict[str, Any]], str | None] | None = None

    def validate(self, payload: Any) -> dict[str, Any]:
        if not isinstance(payload, dict):
            raise InvalidEvent("payload must be a JSON object.", code="wrong_type", field="payload")
        unknown = sorted(set(payload) - set(self.fields))
        if unknown:
            raise InvalidEvent(
                f"field {unknown[0]!r} is not part of this event type; allowed: "
                f"{', '.join(sorted(self.fields))}.",
                code="unexpected_field",
                field=unknown[0],
            )
        clean: dict[str, Any] = {}
        for name, ftype in self.fields.items():
            if name not in payload or payload[name] is None:
                if ftype.optional:
                    continue
                raise InvalidEvent(f"field {name!r} is required.", code="missing_field", field=name)
            clean[name] = ftype.check(name, payload[name])
        if self.check is not None:
            problem = self.check(clean)
            if problem:
                raise InvalidEvent(problem, code="invalid_field")
        return clean
