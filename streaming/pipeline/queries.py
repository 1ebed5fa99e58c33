"""The Spark job: one streaming query per pipeline of the application, all in one driver.

Each query reads the log, runs its pipeline, and writes the pipeline's changes through a
``ChangeTopicSink``, which commits each micro-batch to the change topic exactly once and
advances the pipeline's frontier to where the batch ends in the log
(``liveviews.pipeline.offsetlog``).
"""

from __future__ import annotations

from pathlib import Path

import redis
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from liveviews.app import App
from liveviews.pipeline.checkpoint import check_log, clear_unstarted
from liveviews.pipeline.kafkalog import read_kafka_log
from liveviews.pipeline.offsetlog import BatchEnds
from liveviews.pipeline.plan import built, started
from liveviews.pipeline.realtime.query import start_realtime
from liveviews.pipeline.session import QUERY_NAME, SHUFFLE_PARTITIONS
from liveviews.pipeline.settings import Settings
from liveviews.pipeline.sink import BUILD_CALL_OPS, CALL_OPS, ChangeTopicSink
from liveviews.pipeline.source import SOURCE_NAME, screen_option, store_retry
from liveviews.store.client import Client, connect

SINK_TIMEOUT_S = 600


def read_log(
    spark: SparkSession,
    settings: Settings,
    app: App | None = None,
    pipeline: str = "",
    max_events: int | None = None,
) -> DataFrame:
    """The log as a stream, at most ``max_events`` per micro-batch (``LV_MAX_EVENTS_PER_BATCH``
    by default); for a ``pipeline`` of ``app``, without the entries it sets aside
    (``liveviews.log.screen``). A Kafka log is read by Spark's own Kafka source
    (``liveviews.pipeline.kafkalog``), and screened in a step after it
    (``liveviews.pipeline.kafkascreen``)."""
    if settings.kafka:
        spec = (screen_option(app), pipeline) if app is not None and pipeline else None
        return read_kafka_log(
            spark, settings.kafka, max_events or settings.max_events_per_batch,
            settings.kafka_topic,
            (settings.store_url, settings.log_partitions, spec) if spec else None,
        )  # fmt: skip
    return (
        spark.readStream.format(SOURCE_NAME)
        .option("url", settings.store_url)
        .option("screen", screen_option(app) if app is not None and pipeline else "")
        .option("pipeline", pipeline)
        .option("partitions", str(settings.log_partitions))
        .option("maxEventsPerBatch", str(max_events or settings.max_events_per_batch))
        .option("readTasks", str(settings.read_tasks))
        .load()
    )


def checkpoint_of(settings: Settings, pipeline: str) -> Path:
    """The checkpoint of a pipeline version (``entities``, ``entities@v2``)."""
    return settings.checkpoint_dir / pipeline


def sink_client(settings: Settings) -> Client:
    # A backlog batch writes up to LV_MAX_EVENTS_PER_BATCH events' changes, in calls that can
    # take longer than redis-py's default 5 s socket timeout.
    # Retrying a whole batch is safe: the sink skips what a lost reply had already applied.
    return connect(
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
    client: Client,
    namespace: str = "",
    pipelines: list[str] | None = None,
    max_events: int | None = None,
    building: bool = False,
) -> StreamingQuery:
    """The query of one pipeline version, from its checkpoint: at start, or again after a
    failure. ``namespace`` is the version's (``liveviews.pipeline.versions``); ``pipelines`` those
    whose serving versions make up every view's frontier (``app``'s by default); ``max_events``
    caps its micro-batches (``read_log``); a version ``building`` writes in short store calls
    (``liveviews.pipeline.sink.BUILD_CALL_OPS``)."""
    pipeline = app.pipelines[name]
    qualified = name + namespace
    partitions = str(spark.conf.get(SHUFFLE_PARTITIONS))  # LV_SHUFFLE_PARTITIONS or the user's
    sink = ChangeTopicSink(
        client, app, name, settings.change_shards, settings.change_retention,
        pipelines or list(app.pipelines), BatchEnds(spark), namespace,
        settings.store_ack_replicas, BUILD_CALL_OPS if building else CALL_OPS,
        log_in_store=not settings.kafka,
    )  # fmt: skip
    spark.sparkContext.setLocalProperty("spark.scheduler.pool", name)
    # A query takes the session's settings as they are when it starts; a new checkpoint
    # records this count, which the query then keeps.
    spark.conf.set(SHUFFLE_PARTITIONS, str(pipeline.partitions or partitions))
    realtime = pipeline.realtime and settings.realtime
    clear_unstarted(checkpoint_of(settings, qualified), realtime)
    check_log(checkpoint_of(settings, qualified), bool(settings.kafka))
    try:
        if realtime:
            return start_realtime(
                spark, app, settings, name, sink, str(checkpoint_of(settings, qualified)),
                f"{QUERY_NAME}.{qualified}",
            )  # fmt: skip
        writer = (
            built(pipeline, read_log(spark, settings, app, qualified, max_events))
            .writeStream.queryName(f"{QUERY_NAME}.{qualified}")
            .outputMode(pipeline.output_mode)
            .foreachBatch(sink)
            .option("checkpointLocation", str(checkpoint_of(settings, qualified)))
            .trigger(processingTime=pipeline.trigger_interval or settings.trigger_interval)
        )
        return started(name, writer.start)
    finally:
        spark.sparkContext.setLocalProperty("spark.scheduler.pool", None)  # type: ignore[arg-type]
        spark.conf.set(SHUFFLE_PARTITIONS, partitions)
