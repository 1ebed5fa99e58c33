"""Type aliases shared by the client's modules."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

Json = Any
"""A JSON value as the gateway sent it (decoded by orjson)."""

Rows = dict[str, Json]
"""A key's rows: row id -> value."""

Frontier = dict[str, str]
"""How far a view reflects the log: partition (as a string) -> entry id ``<ms>-<seq>``."""

TokenProvider = Callable[[], "Awaitable[str] | str"]
"""Called for a bearer token, and again whenever the gateway says it expired."""
