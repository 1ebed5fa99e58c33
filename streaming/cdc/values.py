"""Column values: from PostgreSQL's text form to JSON, by the column's type, and which
declared field types a database type can fill.

| database type                        | JSON                   | declare as  |
|--------------------------------------|------------------------|-------------|
| smallint, integer, bigint, oid       | number                 | Integer()   |
| real, double precision               | number                 | Float()     |
| boolean                              | true / false           | Boolean()   |
| json, jsonb                          | the value              | Json()      |
| numeric                              | string ("12.50")       | String()    |
| timestamp with time zone             | string, ISO 8601 UTC   | String()    |
|                                      | ("2026-11-24T14:41:17.123456Z") |             |
| timestamp, date, time                | string, ISO 8601       | String()    |
| anything else (text, varchar, uuid, enums, ...) | string, as PostgreSQL writes it | String() |

A numeric stays a string to keep its precision; a view parses it when it needs a number.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import orjson

from liveviews.schema import Boolean, FieldType, Float, Integer, Json, String

BOOL, INT8, INT2, INT4, OID, JSON, FLOAT4, FLOAT8 = 16, 20, 21, 23, 26, 114, 700, 701
DATE, TIME, TIMESTAMP, TIMESTAMPTZ, NUMERIC, JSONB = 1082, 1083, 1114, 1184, 1700, 3802

INTEGERS = frozenset({INT2, INT4, INT8, OID})
FLOATS = frozenset({FLOAT4, FLOAT8})
JSONS = frozenset({JSON, JSONB})
NOT_TEXT = INTEGERS | FLOATS | JSONS | {BOOL}


class BadValue(ValueError):
    """A value this module cannot turn into JSON (a float that is not finite, say)."""


def fits(field: FieldType, type_oid: int) -> bool:
    """Can a column of this database type fill this declared field?"""
    if isinstance(field, Integer):
        return type_oid in INTEGERS
    if isinstance(field, Float):
        return type_oid in FLOATS or type_oid in INTEGERS
    if isinstance(field, Boolean):
        return type_oid == BOOL
    if isinstance(field, Json):
        return True
    assert isinstance(field, String)
    return type_oid not in NOT_TEXT


def declare_as(type_oid: int) -> str:
    """The field type to declare for a column of this database type."""
    if type_oid in INTEGERS:
        return "Integer()"
    if type_oid in FLOATS:
        return "Float()"
    if type_oid == BOOL:
        return "Boolean()"
    if type_oid in JSONS:
        return "Json()"
    return "String()"


def _float(text: str) -> float:
    value = float(text)
    if value != value or value in (float("inf"), float("-inf")):
        raise BadValue(f"{text} is not a finite number, which JSON cannot hold")
    return value


def _timestamptz(text: str) -> str:
    if text in ("infinity", "-infinity"):
        return text
    moment = datetime.fromisoformat(text).astimezone(UTC)
    return moment.replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


def _iso(text: str) -> str:
    return text.replace(" ", "T", 1) if text[:1].isdigit() else text


CONVERT: dict[int, Callable[[str], Any]] = {
    BOOL: lambda text: text in ("t", "true"),  # pgoutput writes t, a cast to text true
    **{oid: int for oid in INTEGERS},
    **{oid: _float for oid in FLOATS},
    **{oid: orjson.loads for oid in JSONS},
    TIMESTAMPTZ: _timestamptz,
    TIMESTAMP: _iso,
}


def to_json(type_oid: int, text: str | None) -> Any:
    """A column's text value as JSON; None (SQL NULL) stays None."""
    if text is None:
        return None
    convert = CONVERT.get(type_oid)
    if convert is None:
        return text
    try:
        return convert(text)
    except (ValueError, orjson.JSONDecodeError) as exc:
        raise BadValue(str(exc)) from None
