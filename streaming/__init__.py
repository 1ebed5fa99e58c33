"""Liveviews' pipeline side: declare an application, append events, run its views on Spark.

This package's top level does not import Spark; ``streaming.job`` and ``streaming.views`` do.
"""

from __future__ import annotations

from streaming.app import App, EventType, Pipeline, View, anyone_signed_in, load_app, only_owner
from streaming.errors import ConfigurationError, InvalidEvent, LiveviewsError, StoreMismatch
from streaming.events import Event, LoggedEvent, Offset
from streaming.log import EventLog
from streaming.schema import Integer, Schema, String

__all__ = [
    "App",
    "ConfigurationError",
    "Event",
    "EventLog",
    "EventType",
    "Integer",
    "InvalidEvent",
    "LiveviewsError",
    "LoggedEvent",
    "Offset",
    "Pipeline",
    "Schema",
    "StoreMismatch",
    "String",
    "View",
    "anyone_signed_in",
    "load_app",
    "only_owner",
]
