"""Liveviews' pipeline side: declare an application, append events, run its views on Spark.

This package's top level and ``streaming.core`` do not import Spark; ``streaming.job`` does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from streaming.core.app import (
    App,
    EventType,
    Pipeline,
    View,
    anyone_signed_in,
    load_app,
    only_owner,
)
from streaming.core.errors import ConfigurationError, InvalidEvent, LiveviewsError, StoreMismatch
from streaming.core.events import Event, LoggedEvent, Offset
from streaming.core.schema import Boolean, Float, Integer, Json, Schema, String
from streaming.core.tables import Table

if TYPE_CHECKING:
    from streaming.core.log import EventLog

__all__ = [
    "App",
    "Boolean",
    "ConfigurationError",
    "Event",
    "EventLog",
    "EventType",
    "Float",
    "Integer",
    "InvalidEvent",
    "Json",
    "LiveviewsError",
    "LoggedEvent",
    "Offset",
    "Pipeline",
    "Schema",
    "StoreMismatch",
    "String",
    "Table",
    "View",
    "anyone_signed_in",
    "load_app",
    "only_owner",
]


def __getattr__(name: str) -> Any:
    """``EventLog`` is imported on first use, with the store's client library: every Python
    process Spark starts for the views (their workers, the stateful operators' schema check)
    imports this package through the application, and none of them appends to the log. The
    client library alone takes ~140 ms to import, on each of those starts."""
    if name == "EventLog":
        from streaming.core.log import EventLog

        return EventLog
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
