"""Liveviews: declare an application's events and views, append events, and follow the views.

What an application needs is imported from here (``from liveviews import App, Schema, sql``).
The folders say how an event travels: ``liveviews.log`` (events, appends, dead letters), then
``liveviews.pipeline`` (the Spark job that computes the views), ``liveviews.changes`` (the change
topic it writes), ``liveviews.gateway`` (what clients read and follow); beside them
``liveviews.store``, ``liveviews.cdc`` and ``liveviews.cli``.

``import liveviews`` does not import Spark: the views' toolkit (``sql``, ``payloads``,
``view_changes``, ``isolated``, ``Changes``, ...) is imported on first use, as ``EventLog`` is.
"""

from __future__ import annotations

import importlib
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

from liveviews.app import (
    App,
    EventType,
    Pipeline,
    View,
    anyone_signed_in,
    load_app,
    only_owner,
)
from liveviews.errors import ConfigurationError, InvalidEvent, LiveviewsError, StoreMismatch
from liveviews.log.events import Event, LoggedEvent, Offset
from liveviews.schema import Boolean, FieldType, Float, Integer, Json, Schema, String
from liveviews.tables import Table

if TYPE_CHECKING:
    from liveviews.log.eventlog import EventLog
    from liveviews.pipeline.declared import payloads, sql, view_changes
    from liveviews.pipeline.isolation import isolated
    from liveviews.pipeline.views import CHANGE_SCHEMA, Changes, log_order

try:
    __version__ = version("liveviews")
except PackageNotFoundError:  # source on the path without an install
    __version__ = "0+unknown"

__all__ = [
    "CHANGE_SCHEMA",
    "App",
    "Boolean",
    "Changes",
    "ConfigurationError",
    "Event",
    "EventLog",
    "EventType",
    "FieldType",
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
    "__version__",
    "anyone_signed_in",
    "isolated",
    "load_app",
    "log_order",
    "only_owner",
    "payloads",
    "sql",
    "view_changes",
]

LAZY = {
    "EventLog": "liveviews.log.eventlog",
    "sql": "liveviews.pipeline.declared",
    "payloads": "liveviews.pipeline.declared",
    "view_changes": "liveviews.pipeline.declared",
    "isolated": "liveviews.pipeline.isolation",
    "CHANGE_SCHEMA": "liveviews.pipeline.views",
    "Changes": "liveviews.pipeline.views",
    "log_order": "liveviews.pipeline.views",
}
"""Names imported on first use. ``EventLog`` brings the store's client library (~140 ms to
import), the rest bring Spark: every Python process Spark starts for the views imports this
package through the application, and a gateway or the command line imports it too."""


def __getattr__(name: str) -> Any:
    module = LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(LAZY))
