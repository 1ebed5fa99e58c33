"""A view declared as a query (``streaming.job.declared``) over Chirp's events, for the drain
figures of ``bench.pipeline``: each user's count of events and the type of the newest one.

Every event is read and its payload parsed by its type's schema (the user is a payload field),
then Spark's own aggregation keeps each user's state in the JVM: no Python per event. It does
what the ``spark_aggregation`` bound (``bench.ceilings``) does, plus parsing the payload and
making each changed row's JSON value in Spark, so it comes out at or below that bound.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from streaming.core.app import App
from streaming.job.declared import payloads, view_changes

VIEW = "user_activity"


def app() -> App:
    """An application with Chirp's event types and the one declared view."""
    from demo.chirp import app as chirp

    declared = App("declared", event_types=dict(chirp.event_types))
    declared.view(VIEW, description="each user's events: how many, and the newest one's type")

    def user_activity(events: DataFrame) -> DataFrame:
        counted = (
            payloads(events, declared)
            .groupBy("user")
            .agg(
                F.count(F.lit(1)).alias("events"),
                F.max_by("type", "position").alias("newest"),
            )
        )
        return view_changes(counted, VIEW, key="user")

    declared.pipeline("declared", views=[VIEW])(user_activity)
    return declared
