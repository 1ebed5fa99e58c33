"""The public declaration API: an application names its event types, views and pipelines.

Nothing here imports Spark, so the gateway can load an application to validate writes and
check read rules without starting a JVM.
"""

from __future__ import annotations

import importlib
import logging
import os
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from liveviews.errors import ConfigurationError, InvalidEvent
from liveviews.log.events import Event, TimeWindow, now_ms, parse_event_time
from liveviews.schema import FieldType, Schema
from liveviews.tables import OPERATIONS, Table, declare_table

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

NAME_RE = re.compile(r"[a-z][a-z0-9_]{0,62}")
INTERVAL_RE = re.compile(r"[0-9]+ (millisecond|second|minute)s?")
VERSION_RE = re.compile(r"[A-Za-z0-9_]{1,32}")
"""A pipeline version: it names store keys and checkpoints, and rides in event ids."""
OUTPUT_MODES = ("update", "append")
"""Spark's output modes a pipeline may run in; complete mode would rewrite every row of its
views at each micro-batch."""

ReadRule = Callable[[str, str], bool]
"""``rule(subject, key)``: may the signed-in ``subject`` read the view's ``key``?"""


def anyone_signed_in(subject: str, key: str) -> bool:
    return True


def only_owner(subject: str, key: str) -> bool:
    return subject == key


@dataclass(frozen=True)
class EventType:
    """A kind of fact the log accepts, its payload schema, and which entity it is about."""

    name: str
    schema: Schema
    partition_key: Callable[[dict[str, Any]], str]
    description: str = ""
    author: Callable[[dict[str, Any]], str] | None = None
    """Who the event claims to be written by; the gateway lets a subject publish only as itself."""
    publishable: bool = True
    """Clients may publish it; a declared table's row changes come from the database only."""


@dataclass(frozen=True)
class View:
    """A named, keyed table. Each key holds rows (row id -> JSON value).

    With ``limit``, a key serves only its ``limit`` rows of highest score (ties: highest row id);
    the others are kept as candidates, so a row that leaves the top brings the next one back.
    Its readers may also subscribe to a window of a key: its top rows, or a page of them.

    With ``listable``, the sink keeps an index of the view's keys, so that a client may
    subscribe to the whole view or to the keys with a prefix (docs/PROTOCOL.md, section 5.1).
    Declare it for views whose keys a page may show at once, not for one with a key per user.
    """

    name: str
    description: str = ""
    limit: int | None = None
    readable: ReadRule = anyone_signed_in
    listable: bool = False


@dataclass(frozen=True)
class Pipeline:
    """A pure function from the event DataFrame to the changes of some views.

    The function receives a (streaming or static) DataFrame with ``EVENT_COLUMNS`` and returns
    one with ``CHANGE_COLUMNS`` from ``liveviews.pipeline.views``; it must not read or write
    anything.
    """

    name: str
    build: Callable[[DataFrame], DataFrame]
    views: tuple[str, ...]
    partitions: int | None = None
    """State partitions of the pipeline's query (``LV_SHUFFLE_PARTITIONS`` when None). Each is a
    stateful task per micro-batch; a pipeline whose state has one key (a global aggregate) runs
    best on one. A query keeps the count its checkpoint was created with."""
    trigger_interval: str | None = None
    """Time between the starts of the pipeline's micro-batches, such as ``"2 seconds"``
    (``LV_TRIGGER_INTERVAL`` when None). Every micro-batch costs CPU whatever it holds: a view
    that can lag by seconds leaves the cores to pipelines whose views should not."""
    version: str | None = None
    """The pipeline's version, 1 to 32 letters, digits or ``_``; when None, derived from its
    code (``liveviews.pipeline.code.derive``). A new version is built beside the serving one
    and replaces it once it has caught up (docs/VERSIONS.md)."""
    output_mode: str = "update"
    """Spark's output mode of the pipeline's query: ``"update"``, each micro-batch's changed
    rows (an aggregation's changed groups); or ``"append"``, each row once, when it is final,
    which Spark requires of an outer join of two event types and which holds an aggregation's
    window back until the watermark closes it."""
    realtime: bool = False
    """Run the pipeline's query in Spark's Real-Time Mode (docs/REALTIME.md): each event flows
    through the query as it is appended, and its changes reach subscribers in milliseconds;
    ``trigger_interval`` is then the time between checkpoints (``LV_REALTIME_INTERVAL`` when
    None).
    Only a query Spark can run that way (a declared view; no Python per event) is accepted."""


@dataclass
class App:
    """An application: the event types it accepts and the views derived from them."""

    name: str
    event_types: dict[str, EventType] = field(default_factory=dict)
    views: dict[str, View] = field(default_factory=dict)
    pipelines: dict[str, Pipeline] = field(default_factory=dict)
    tables: dict[str, Table] = field(default_factory=dict)
    """Database tables whose row changes enter the log (``liveviews.cdc``), by name."""
    samples: Callable[[int], list[Any]] | None = None
    """Raw events (at a time in ms) that take every view's code path once: the pipeline's
    start-up tuning replays them to warm up its JVM class archive
    (``liveviews.pipeline.tuning``)."""

    def event_type(
        self,
        name: str,
        schema: Schema,
        partition_key: Callable[[dict[str, Any]], str],
        *,
        description: str = "",
        author: Callable[[dict[str, Any]], str] | None = None,
    ) -> EventType:
        _check_name("event type", name, self.event_types)
        et = EventType(name, schema, partition_key, description, author)
        self.event_types[name] = et
        return et

    def table(
        self,
        name: str,
        *,
        columns: Mapping[str, FieldType],
        key: tuple[str, ...] | list[str] | str,
        partition_by: str | None = None,
        description: str = "",
    ) -> Table:
        """A PostgreSQL table followed by ``python -m liveviews.cdc``: ``"orders"`` (schema
        ``public``) or ``"sales.orders"``. Its row changes become events of the types
        ``<name>_insert``, ``<name>_update`` and ``<name>_delete`` (``liveviews.tables``
        says what they carry), which clients may not publish."""
        table = declare_table(name, columns, key, partition_by, description)
        if table.name in self.tables:
            raise ConfigurationError(f"table {table.name!r} is declared twice.")
        schemas = table.payload_schemas()
        for operation in OPERATIONS:
            _check_name("event type", table.event_type(operation), self.event_types)
        for operation in OPERATIONS:
            type_name = table.event_type(operation)
            self.event_types[type_name] = EventType(
                type_name,
                schemas[type_name],
                table.partition_key_of(operation),
                description=f"a row {operation} in {table.qualified}",
                publishable=False,
            )
        self.tables[table.name] = table
        return table

    def view(
        self,
        name: str,
        *,
        description: str = "",
        limit: int | None = None,
        readable: ReadRule = anyone_signed_in,
        listable: bool = False,
    ) -> View:
        _check_name("view", name, self.views)
        if limit is not None and limit < 1:
            raise ConfigurationError(f"view {name!r}: limit must be at least 1.")
        v = View(name, description, limit, readable, listable)
        self.views[name] = v
        return v

    def pipeline(
        self,
        name: str,
        views: Iterable[str],
        *,
        partitions: int | None = None,
        trigger_interval: str | None = None,
        version: str | None = None,
        output_mode: str = "update",
        realtime: bool = False,
    ) -> Callable[[Callable[[DataFrame], DataFrame]], Callable[[DataFrame], DataFrame]]:
        """Decorator: ``@app.pipeline("entities", views=["profiles", ...])``; ``partitions``:
        its state partitions, when not ``LV_SHUFFLE_PARTITIONS``; ``trigger_interval``: the
        time between its micro-batches, when not ``LV_TRIGGER_INTERVAL``; ``version``: its
        version, when not derived from its code (see ``Pipeline``); ``output_mode``: Spark's
        output mode of its query, ``"update"`` or ``"append"``; ``realtime``: run it in Spark's
        Real-Time Mode (see ``Pipeline``)."""
        names = tuple(views)
        if partitions is not None and partitions < 1:
            raise ConfigurationError(
                f"pipeline {name!r} needs at least one partition, not {partitions}."
            )
        if trigger_interval is not None and INTERVAL_RE.fullmatch(trigger_interval) is None:
            raise ConfigurationError(
                f"pipeline {name!r}: trigger_interval {trigger_interval!r} is not an interval;"
                " write a number and a unit, such as '2 seconds' or '500 milliseconds'."
            )

        if version is not None and VERSION_RE.fullmatch(version) is None:
            raise ConfigurationError(
                f"pipeline {name!r}: version {version!r} is not 1 to 32 letters, digits or '_'."
            )

        if output_mode not in OUTPUT_MODES:
            raise ConfigurationError(
                f"pipeline {name!r}: output_mode {output_mode!r} is not one of "
                f"{', '.join(map(repr, OUTPUT_MODES))}."
            )

        def register(fn: Callable[[DataFrame], DataFrame]) -> Callable[[DataFrame], DataFrame]:
            _check_name("pipeline", name, self.pipelines)
            for v in names:
                if v not in self.views:
                    raise ConfigurationError(f"pipeline {name!r} names undeclared view {v!r}.")
                owner = self.owner_of(v)
                if owner is not None:
                    raise ConfigurationError(f"view {v!r} is already written by {owner!r}.")
            self.pipelines[name] = Pipeline(
                name, fn, names, partitions, trigger_interval, version, output_mode, realtime
            )
            return fn

        return register

    def owner_of(self, view: str) -> str | None:
        for p in self.pipelines.values():
            if view in p.views:
                return p.name
        return None

    def validate(self, raw: Any, window: TimeWindow | None = None, now: int | None = None) -> Event:
        """Check one event as a client sends it: ``{"type", "payload", "time"?}``.

        ``window`` bounds its time around ``now`` (the clock by default); without one, any
        time from 1970 to the year 9999 is taken (a replay or an import of old events).
        """
        if not isinstance(raw, dict):
            raise InvalidEvent("an event must be a JSON object.", code="wrong_type")
        unknown = sorted(set(raw) - {"type", "payload", "time"})
        if unknown:
            raise InvalidEvent(
                f"field {unknown[0]!r} is not part of an event; use type, payload and time.",
                code="unexpected_field",
                field=unknown[0],
            )
        type_name = raw.get("type")
        et = self.event_types.get(type_name) if isinstance(type_name, str) else None
        if et is None:
            raise InvalidEvent(
                f"unknown event type {type_name!r}; known types: "
                f"{', '.join(sorted(self.event_types))}.",
                code="unknown_event_type",
                field="type",
            )
        payload = et.schema.validate(raw.get("payload"))
        time_ms = parse_event_time(raw.get("time"), window, now)
        return Event(et.name, et.partition_key(payload), payload, time_ms)

    def validate_batch(self, raws: Iterable[Any], window: TimeWindow | None = None) -> list[Event]:
        """Check a batch; with a ``window``, its events' times are bounded around one instant,
        so an event without a time and the window agree on what "now" is."""
        out = []
        now = now_ms()
        for i, raw in enumerate(raws):
            try:
                out.append(self.validate(raw, window, now))
            except InvalidEvent as exc:
                raise exc.at(i) from None
        return out


def _check_name(kind: str, name: str, existing: Mapping[str, object]) -> None:
    if NAME_RE.fullmatch(name) is None:
        raise ConfigurationError(
            f"{kind} name {name!r} must be lowercase letters, digits and '_', "
            "starting with a letter."
        )
    if name in existing:
        raise ConfigurationError(f"{kind} {name!r} is declared twice.")


def app_dir() -> str:
    """The folder an application is imported from, beside the installed packages:
    ``LV_APP_DIR``, else the current directory (as uvicorn and Celery do)."""
    from liveviews.config.catalog import APP_DIR
    from liveviews.config.layers import environment

    return os.path.abspath(APP_DIR.read(environment()) or os.getcwd())


def _on_path(directory: str) -> None:
    """``directory`` on this process's path, after what is there: an installed package of the
    same name wins."""
    if directory not in sys.path:
        sys.path.append(directory)


def _share_path(module: Any, directory: str) -> None:
    """When ``module`` came from ``directory``, put it on the path of every Python process this
    one starts too (the pipeline's Spark workers unpickle the views by module name; a rebuild
    runs in a child)."""
    origin = getattr(module, "__file__", None) or ""
    if not origin.startswith(directory + os.sep):
        return
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if directory not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([directory, *paths])


def load_app(spec: str) -> App:
    """Import ``"package.module:attribute"``, as ``LV_APP`` names it, from the installed
    packages or the application's folder (``app_dir``)."""
    module_name, _, attr = spec.partition(":")
    directory = app_dir()
    _on_path(directory)
    try:
        module = importlib.import_module(module_name)
        app = getattr(module, attr or "app")
    except ConfigurationError:
        raise  # a declaration the application made, refused with its own sentence
    except (ImportError, AttributeError) as exc:
        raise ConfigurationError(
            f"LV_APP={spec!r} does not name an application ('module:attribute'): {exc}"
        ) from exc
    except Exception as exc:  # noqa: BLE001 - the application's code, as it declares itself
        # Starting again would fail the same way: a sentence and exit status 2, not a restart
        # loop; the traceback goes to the log file only.
        from liveviews.console import FILE_ONLY  # here: the console imports the settings

        logging.getLogger("liveviews.app").error(
            "importing %s failed", module_name, exc_info=exc, extra=FILE_ONLY
        )
        raise ConfigurationError(
            f"LV_APP={spec!r}: the application failed as it was declared, with "
            f"{type(exc).__name__}: {exc} (the traceback is in the process's log file)."
        ) from exc
    if not isinstance(app, App):
        raise ConfigurationError(f"LV_APP={spec!r} is a {type(app).__name__}, not an App.")
    _share_path(sys.modules[module_name.partition(".")[0]], directory)
    return app
