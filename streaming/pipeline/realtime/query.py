"""A pipeline's query in Spark's Real-Time Mode: the JVM source, the JVM writer, the frontier.

The query reads the log with ``io.liveviews.spark.LogSource`` (a Kafka log with Spark's own
Kafka source) and writes each row change as it
comes with ``io.liveviews.spark.ChangeTopicWriter`` (``jvm/``): Spark refuses a Python source,
Python sink or ``foreachBatch`` in this mode. It runs in epochs of ``LV_REALTIME_INTERVAL`` (or
the pipeline's ``trigger_interval``): Spark checkpoints at each epoch's end, and the pipeline's
frontier advances then (``RealtimeFrontier``), after every writer of the epoch has closed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import orjson
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from liveviews.app import App
from liveviews.changes.cuts import CUTS_STREAM
from liveviews.changes.topic import WANTS_STREAM
from liveviews.pipeline.kafkalog import read_kafka_log
from liveviews.pipeline.plan import built, refused, started_realtime
from liveviews.pipeline.realtime import jar
from liveviews.pipeline.realtime.frontier import realtime_frontier
from liveviews.pipeline.realtime.slots import READERS, needed, readers, reserve
from liveviews.pipeline.session import SHUFFLE_PARTITIONS
from liveviews.pipeline.sink import ChangeTopicSink, sink_script
from liveviews.store.client import is_cluster

if TYPE_CHECKING:
    from liveviews.pipeline.settings import Settings


def read_log_realtime(
    spark: SparkSession, settings: Settings, pipeline: str = "", version: str = ""
) -> DataFrame:
    """The log as a stream through the JVM source, in either mode; for ``pipeline``, ending its
    batches and epochs at the cuts appended for it (``liveviews.changes.cuts``), and for its
    ``version`` (the qualified name its writer marks epochs with), ending an epoch run again
    after a failure once it has read the log as it was then (``LogTailReader``). A Kafka log
    through Spark's own Kafka source, unscreened (``liveviews.pipeline.kafkalog``): its epochs
    end on time, neither at a client's wait nor at a cut."""
    if settings.kafka:
        return read_kafka_log(spark, settings.kafka, settings.max_events_per_batch,
                              settings.kafka_topic, rate_limited=False)  # fmt: skip
    return (
        spark.readStream.format(jar.SOURCE_CLASS)
        .option("url", settings.store_url)
        .option("partitions", str(settings.log_partitions))
        .option("maxEventsPerBatch", str(settings.max_events_per_batch))
        .option("readers", str(READERS))
        .option("wants", WANTS_STREAM)  # reflects() ends an epoch early: gateway/feed/wants.py
        .option("cuts", CUTS_STREAM)  # a group of views is released at them: gateway/feed/cuts.py
        .option("pipeline", pipeline)
        .option("version", version)
        .load()
    )


def writer_config(app: App, settings: Settings, name: str, namespace: str) -> str:
    """What the JVM writer needs, as the JSON its constructor takes."""
    views = {v.name: {"limit": v.limit or 0, "listed": int(v.listable)} for v in app.views.values()}
    return orjson.dumps(
        {"url": settings.store_url, "name": name, "namespace": namespace,
         "shards": settings.change_shards, "retention": settings.change_retention,
         "script": sink_script(), "views": views}
    ).decode()  # fmt: skip


def start_realtime(
    spark: SparkSession,
    app: App,
    settings: Settings,
    name: str,
    sink: ChangeTopicSink,
    checkpoint: str,
    query_name: str,
) -> StreamingQuery:
    """The Real-Time Mode query of one pipeline version; ``sink`` advances its frontier."""
    pipeline = app.pipelines[name]
    if is_cluster(sink.client):
        raise refused(
            name,
            "in Real-Time Mode its JVM source and writer talk to one store server, and REDIS_URL "
            "names a store cluster. Run it in micro-batches there: LV_REALTIME=off.",
        )
    try:
        jar.ensure_jar()
    except Exception as exc:  # noqa: BLE001 - its message says what to install
        raise refused(name, f"Real-Time Mode is not available here: {exc}", exc) from exc
    rows = built(pipeline, read_log_realtime(spark, settings, name, sink.qualified))
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    writer = jvm.io.liveviews.spark.ChangeTopicWriter(
        writer_config(app, settings, name, sink.namespace)
    )
    interval = pipeline.trigger_interval or settings.realtime_interval
    stream = (
        rows._jdf.writeStream()
        .queryName(query_name)
        .outputMode(pipeline.output_mode)
        .foreach(writer)
        .option("checkpointLocation", checkpoint)
        .trigger(jvm.org.apache.spark.sql.streaming.Trigger.RealTime(interval))
    )
    slots = needed(pipeline, settings, int(str(spark.conf.get(SHUFFLE_PARTITIONS))))
    reserve(spark, app, name, query_name, slots, readers(settings))
    # Followed before it starts, so that no epoch's report comes before the frontier knows it.
    realtime_frontier(spark).follow(query_name, sink)
    tracker = spark.sparkContext.statusTracker()
    return started_realtime(name, lambda: StreamingQuery(stream.start()), tracker.getJobIdsForGroup)
