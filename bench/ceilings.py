"""Bounds on this machine: the same load through pipelines that do less than Chirp's views,
on the same source and sink.

Of a backlog drain (``bench.pipeline``, on the same SparkSession):

- ``source``: the log source alone. Every event is read from the store and handed to Spark;
  the pipeline keeps none of them, and the sink writes no change, only the frontier.
- ``python_operator``: the source, then a Python stateful processor grouped as Chirp's
  entities are (by bucket of users, with the same columns) that reads every event and keeps
  and returns nothing: what Spark's Python ``transformWithState`` costs before any view logic,
  state access or change row.
- ``spark_aggregation``: the source, then Spark's own streaming aggregation of every event,
  each key's (the user an event is partitioned by) count of events and newest offset, its
  state in the JVM, and a change row per key of a batch through the sink: what a view that
  Spark computes without Python costs.

A drain through every view cannot be faster than the first two; the third says how far views
written as Spark's own operators could go on the same machine.

Of the latency from a write to its delta (``bench.latency``, the whole system in processes):
one view, ``profiles``, each user's newest name, and nothing else; Chirp's entities pipeline
also keeps tweets, likes, followers and timelines, and a rename rewrites the user's tweets.

- ``spark_state``: Spark's own streaming aggregation, the newest profile event of each user
  (``max_by`` in log order), its state in the JVM: no Python process in a micro-batch's tasks.
- ``python_state``: a Python stateful processor grouped as Chirp's entities are, with a map
  state keyed by user as theirs: per user of a batch one state read, a write when the
  profile changed, and the profile row. What any view written as a Python stateful operator
  pays per micro-batch.

The applications are module attributes, for ``LV_APP``: ``bench.ceilings:SPARK_STATE`` and
``bench.ceilings:PYTHON_STATE``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import orjson
from pyspark import cloudpickle
from pyspark.sql import Column, DataFrame, Row
from pyspark.sql import functions as F
from pyspark.sql.streaming.stateful_processor import (
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)

from demo.chirp.views import ENTITY_STATE, USER, entity_input, profile_value
from liveviews.app import App
from liveviews.log.events import LOG_PREFIX
from liveviews.pipeline.views import CHANGE_SCHEMA, Changes, log_order

if TYPE_CHECKING:
    import redis

KINDS = {
    "source": "the log source alone (no view)",
    "python_operator": "the log source and a Python stateful operator that does nothing",
    "spark_aggregation": "the log source and Spark's own aggregation of every event by key",
}

# Spark's Python workers unpickle the processor; ``bench`` is not an installed package, so its
# code travels by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def _one_pipeline(name: str, view: str, kind: str, build: Callable[[DataFrame], DataFrame]) -> App:
    """An application with Chirp's event types and one pipeline, ``kind``, writing ``view``."""
    from demo.chirp import app as chirp

    one = App(name, event_types=dict(chirp.event_types))
    one.view(view, description=chirp.views[view].description if view in chirp.views else "")
    one.pipeline(kind, views=[view])(build)
    return one


def app(kind: str) -> App:
    """An application with one pipeline of ``kind`` and the event types of Chirp."""
    if kind not in KINDS:
        raise ValueError(f"unknown ceiling {kind!r}; known: {', '.join(KINDS)}")
    if kind == "spark_aggregation":
        return _one_pipeline(f"ceiling_{kind}", "event_counts", kind, _spark_aggregation)
    build = _source if kind == "source" else _python_operator
    return _one_pipeline(f"ceiling_{kind}", "nothing", kind, build)


def _source(events: DataFrame) -> DataFrame:
    # A condition no event meets, which Spark cannot fold away: every event is still read.
    kept = events.where(F.col("event_time_ms") < 0)
    return kept.select(
        F.lit("nothing").alias("view"),
        "key",
        F.col("offset").alias("row"),
        F.lit(None).cast("string").alias("value"),
        F.lit(0.0).alias("score"),
    )


def _log_order(offset: str) -> Column:
    entry_id = F.split(offset, "-")
    ms, seq = entry_id.getItem(0), entry_id.getItem(1)
    return F.struct(ms.cast("long").alias("ms"), seq.cast("long").alias("seq"))


def _spark_aggregation(events: DataFrame) -> DataFrame:
    counted = events.groupBy("key").agg(
        F.count(F.lit(1)).alias("events"),
        F.max_by("offset", _log_order("offset")).alias("newest"),
    )
    return counted.select(
        F.lit("event_counts").alias("view"),
        "key",
        F.lit("count").alias("row"),
        F.to_json(F.struct("events", "newest")).alias("value"),
        F.lit(0.0).alias("score"),
    )


def _python_operator(events: DataFrame) -> DataFrame:
    return entity_input(events).transformWithState(Nothing(), CHANGE_SCHEMA, "Update", "None")


class Nothing(StatefulProcessor):
    """Reads each row Spark passes it; no state, no output."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        pass

    def handleInputRows(
        self, key: Any, rows: Iterator[Row], timerValues: TimerValues
    ) -> Iterator[Row]:
        for _ in rows:
            pass
        return iter(())

    def close(self) -> None:
        pass


LATENCY_KINDS = {
    "spark_state": "one view (each user's newest profile) as Spark's own aggregation",
    "python_state": "one view (each user's newest profile) as a Python stateful operator",
}
PROFILE_EVENT = "user string, name string, avatar string"


def profile_app(kind: str) -> App:
    """An application with Chirp's event types and one view, ``profiles``, built by ``kind``."""
    if kind not in LATENCY_KINDS:
        raise ValueError(f"unknown latency bound {kind!r}; known: {', '.join(LATENCY_KINDS)}")
    build = _spark_state if kind == "spark_state" else _python_state
    return _one_pipeline(f"bound_{kind}", "profiles", kind, build)


def _spark_state(events: DataFrame) -> DataFrame:
    order = _log_order("offset")
    p = F.from_json("payload", PROFILE_EVENT)
    # The keys sorted, and a missing avatar written as null, as the sink's other values are.
    value = F.to_json(
        F.struct(p["avatar"].alias("avatar"), p["name"].alias("name"), F.col("key").alias("user")),
        {"ignoreNullFields": "false"},
    )
    renames = events.where(F.col("type") == "profile_set")
    newest = renames.groupBy("key").agg(F.max_by(value, order).alias("value"))
    return newest.select(
        F.lit("profiles").alias("view"),
        "key",
        F.lit("profile").alias("row"),
        "value",
        F.lit(0.0).alias("score"),
    )


def _python_state(events: DataFrame) -> DataFrame:
    return entity_input(events).transformWithState(Profiles(), CHANGE_SCHEMA, "Update", "None")


class Profiles(StatefulProcessor):
    """Each user's newest profile, in a map state keyed by user as Chirp's entities are."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.profiles = handle.getMapState("profiles", USER, ENTITY_STATE)

    def handleInputRows(
        self, key: Any, rows: Iterator[Row], timerValues: TimerValues
    ) -> Iterator[Row]:
        newest: dict[str, tuple[tuple[int, int], str]] = {}
        for _, _, user, offset, type_, payload, _ in rows:  # the columns of ``entity_input``
            if type_ != "profile_set":
                continue
            order = log_order(offset)
            if user not in newest or order > newest[user][0]:
                newest[user] = (order, payload)
        changes = Changes()
        for user, (_, payload) in newest.items():
            p = orjson.loads(payload)
            profile = [p["name"], p.get("avatar")]
            encoded = orjson.dumps(profile)
            stored = self.profiles.getValue((user,))
            if stored is None or stored[0] != encoded:
                self.profiles.updateValue((user,), (encoded,))
            changes.upsert("profiles", user, "profile", profile_value(user, profile))
        yield from changes.rows()

    def close(self) -> None:
        pass


SPARK_STATE = profile_app("spark_state")
PYTHON_STATE = profile_app("python_state")


def forget_views(client: redis.Redis) -> None:
    """Everything but the log: the next pipeline starts from an empty change topic and frontier."""
    for key in list(client.scan_iter(count=1000)):
        if not key.startswith(LOG_PREFIX.encode()):
            client.delete(key)
