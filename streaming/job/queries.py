"""The Spark job: one streaming query per pipeline of the application, all in one driver.

Each query reads the log, runs its pipeline, and writes the pipeline's changes through a
``ChangeTopicSink``, which commits each micro-batch to the change topic exactly once and
advances the pipeline's frontier to where the batch ends in the log (``streaming.job.offsetlog``).
"""

from __future__ import annotations

from pathlib import Path

import redis
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from streaming.core.app import App, Pipeline
from streaming.core.changes import VIEWS_FRONTIER
from streaming.core.errors import ConfigurationError
from streaming.core.log import check_layout
from streaming.core.settings import Settings
from streaming.job.offsetlog import BatchEnds
from streaming.job.progress import record_progress
from streaming.job.session import QUERY_NAME, SHUFFLE_PARTITIONS
from streaming.job.sink import ChangeTopicSink
from streaming.job.source import SOURCE_NAME, screen_option, store_retry
from streaming.job.versioning import Versioning
from streaming.job.views import CHANGE_SCHEMA

SINK_TIMEOUT_S = 600


def read_log(
    spark: SparkSession, settings: Settings, app: App | None = None, pipeline: str = ""
) -> DataFrame:
    """The log as a stream; for a ``pipeline`` of ``app``, without the entries it sets aside
    (``streaming.core.screen``)."""
    return (
        spark.readStream.format(SOURCE_NAME)
        .option("url", settings.store_url)
        .option("screen", screen_option(app) if app is not None and pipeline else "")
        .option("pipeline", pipeline)
        .option("partitions", str(settings.log_partitions))
        .option("maxEventsPerBatch", str(settings.max_events_per_batch))
        .option("readTasks", str(settings.read_tasks))
        .load()
    )


def changes(pipeline: Pipeline, events: DataFrame) -> DataFrame:
    """A pipeline's changes, in the columns the sink takes."""
    return pipeline.build(events).select(*[f.name for f in CHANGE_SCHEMA.fields])


def checkpoint_of(settings: Settings, pipeline: str) -> Path:
    """The checkpoint of a pipeline version (``entities``, ``entities@v2``)."""
    return settings.checkpoint_dir / pipeline


def start(spark: SparkSession, app: App, settings: Settings) -> list[StreamingQuery]:
    """One query per pipeline, each with its own checkpoint, source and frontier (two while a
    new version of it is built beside the serving one: ``streaming.job.versioning``).

    A pipeline's micro-batches then wait only for its own operators: a small batch of the
    Chirp entities no longer waits for the activity windows, and the reverse.
    """
    return list(start_versions(spark, app, settings).queries.values())


def start_versions(spark: SparkSession, app: App, settings: Settings) -> Versioning:
    """The queries of every pipeline version that should run, and what runs them."""
    if not app.pipelines:
        raise ConfigurationError(f"application {app.name!r} declares no pipeline.")
    if VIEWS_FRONTIER in app.pipelines:
        raise ConfigurationError(
            f"pipeline {VIEWS_FRONTIER!r}: the name is the frontier of every view; rename it."
        )
    older = settings.checkpoint_dir / QUERY_NAME
    if older.exists() and not any(checkpoint_of(settings, p).exists() for p in app.pipelines):
        raise ConfigurationError(
            f"{older} holds a checkpoint of an earlier layout (one query for every pipeline)."
            " Remove the data directory (make clean-data) and start again:"
            " the views are recomputed from the log."
        )
    client = sink_client(settings)
    check_layout(client, settings.log_partitions, settings.change_shards)
    record_progress(spark, client)
    versioning = Versioning(spark, app, settings, client)
    versioning.start()
    return versioning


def sink_client(settings: Settings) -> redis.Redis:
    # A backlog batch writes up to LV_MAX_EVENTS_PER_BATCH events' changes, in calls that can
    # take longer than redis-py's default 5 s socket timeout.
    # Retrying a whole batch is safe: the sink skips what a lost reply had already applied.
    return redis.Redis.from_url(
        settings.store_url,
        socket_timeout=SINK_TIMEOUT_S,
        retry=store_retry(),  # a restarting store pauses the batch instead of failing it
        retry_on_error=[redis.ConnectionError, redis.TimeoutError],
    )


def start_pipeline(
    spark: SparkSession,
    app: App,
    settings: Settings,
    name: str,
    client: redis.Redis,
    namespace: str = "",
    pipelines: list[str] | None = None,
) -> StreamingQuery:
    """The query of one pipeline version, from its checkpoint: at start, or again after a
    failure. ``namespace`` is the version's (``streaming.core.versions``); ``pipelines`` those
    whose serving versions make up every view's frontier (``app``'s by default)."""
    pipeline = app.pipelines[name]
    qualified = name + namespace
    partitions = str(spark.conf.get(SHUFFLE_PARTITIONS))  # LV_SHUFFLE_PARTITIONS or the user's
    sink = ChangeTopicSink(
        client, app, name, settings.change_shards, settings.change_retention,
        pipelines or list(app.pipelines), BatchEnds(spark), namespace,
    )  # fmt: skip
    spark.sparkContext.setLocalProperty("spark.scheduler.pool", name)
    # A query takes the session's settings as they are when it starts; a new checkpoint
    # records this count, which the query then keeps.
    spark.conf.set(SHUFFLE_PARTITIONS, str(pipeline.partitions or partitions))
    try:
        return (
            changes(pipeline, read_log(spark, settings, app, qualified))
            .writeStream.queryName(f"{QUERY_NAME}.{qualified}")
            .outputMode("update")
            .foreachBatch(sink)
            .option("checkpointLocation", str(checkpoint_of(settings, qualified)))
            .trigger(processingTime=pipeline.trigger_interval or settings.trigger_interval)
            .start()
        )
    finally:
        spark.sparkContext.setLocalProperty("spark.scheduler.pool", None)  # type: ignore[arg-type]
        spark.conf.set(SHUFFLE_PARTITIONS, partitions)
