"""Task slots for queries in Real-Time Mode.

A query in Real-Time Mode runs every task of an epoch at once and for the whole epoch: one per
reader of the log and one per state partition after the shuffle, which streams records from
the first to the second. Spark never preempts a task, so a query that cannot have all its
slots waits forever, and one that takes the last slot leaves the micro-batch queries of the
same driver none. Each such query's slots are counted when it starts, against the master's,
and a local master the user did not choose is sized for them.
"""

from __future__ import annotations

import dataclasses
import os
import re
from typing import TYPE_CHECKING

from liveviews.pipeline.plan import refused
from liveviews.pipeline.settings import default_master

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from liveviews.app import App, Pipeline
    from liveviews.pipeline.settings import Settings

READERS = 1
"""Tasks that read a log in the store in Real-Time Mode (``LogSource``), each blocking on its
share of the partitions for the whole epoch. Spark's Kafka source reads each of the topic's
partitions with a task of its own (``readers``)."""
_held: dict[str, dict[str, int]] = {}
"""Per SparkContext (its application id): query name -> slots of its running queries."""


def readers(settings: Settings) -> int:
    """The tasks that read the log in Real-Time Mode: ``READERS`` on the store, one per
    partition of the topic on Kafka."""
    return settings.log_partitions if settings.kafka else READERS


def needed(pipeline: Pipeline, settings: Settings, shuffle_partitions: int) -> int:
    """The slots ``pipeline``'s query holds: its readers and its state partitions (counted
    whether or not its plan shuffles: the slots of a plan without one are then spare)."""
    return readers(settings) + (pipeline.partitions or shuffle_partitions)


def chosen(settings: Settings, app: App) -> App:
    """``app`` as ``settings`` run it: with ``LV_REALTIME=off``, no pipeline in Real-Time Mode
    (each is then its own version, built again in micro-batches)."""
    if not settings.realtime:
        # In place: the process knows its application as the one object LV_APP names.
        for name, pipeline in app.pipelines.items():
            app.pipelines[name] = dataclasses.replace(pipeline, realtime=False)
    return app


def sized(settings: Settings, app: App) -> Settings:
    """``settings`` with a local master big enough for ``app``'s queries in Real-Time Mode
    beside the slots its micro-batch queries can take at once, unless the user chose the master
    (``SPARK_MASTER``). An epoch's tasks start together or not at all: Spark fails a query whose
    next epoch finds fewer slots free than it needs, so the micro-batch queries must never be
    able to take them."""
    realtime = [p for p in app.pipelines.values() if p.realtime]
    if not realtime or settings.spark_master != default_master():
        return settings
    extra = sum(needed(p, settings, settings.shuffle_partitions) for p in realtime)
    # A micro-batch query's widest stage: its read tasks (one per partition of a Kafka topic)
    # or its state partitions.
    read = settings.log_partitions if settings.kafka else settings.read_tasks
    batches = sum(max(read, p.partitions or settings.shuffle_partitions)
                  for p in app.pipelines.values() if not p.realtime)  # fmt: skip
    base = max(2 * (os.cpu_count() or 1), batches)
    return dataclasses.replace(settings, spark_master=f"local[{base + extra}]")


def reserve(
    spark: SparkSession, app: App, name: str, query_name: str, slots: int, reading: int
) -> None:
    """Counts ``slots`` for ``query_name`` (of ``app``'s pipeline ``name``, ``reading`` of them
    its readers), or refuses the pipeline with a sentence when the master cannot give them
    beside the others."""
    context = spark.sparkContext
    held = _held.setdefault(context.applicationId, {})
    active = {q.name for q in spark.streams.active}
    for other in [q for q in held if q not in active or q == query_name]:
        del held[other]
    capacity = _capacity(str(context.master), context.defaultParallelism)
    # Micro-batch queries need a slot that no long-running task holds.
    kept = 1 if any(not p.realtime for p in app.pipelines.values()) else 0
    if sum(held.values()) + slots + kept > capacity:
        others = ", ".join(sorted(held)) or "none"
        raise refused(
            name,
            f"in Real-Time Mode its query needs {slots} task slots at once ({reading} to read "
            f"the log, {slots - reading} for its state partitions), and the master has "
            f"{capacity}, {sum(held.values())} of them held by other queries in Real-Time Mode "
            f"({others}){' and one kept for micro-batches' if kept else ''}. Run on a master "
            f"with more (SPARK_MASTER=local[{sum(held.values()) + slots + kept + 2}]), declare "
            "it with fewer partitions, or run it in micro-batches (without realtime=True).",
        )
    held[query_name] = slots


def _capacity(master: str, parallelism: int) -> int:
    found = re.fullmatch(r"local\[(\d+)(?:,\d+)?\]", master)
    return int(found.group(1)) if found else parallelism
