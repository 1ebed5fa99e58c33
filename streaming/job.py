"""The Spark job: one streaming query reads the log and runs every pipeline of the application.

Every pipeline's output and the source's read markers are unioned into one DataFrame and
written by one ``ChangeTopicSink``; so each micro-batch reads the log once and is committed
to the change topic in one transaction.
"""

from __future__ import annotations

import os
import sys
from functools import reduce

import redis
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

from streaming.app import App
from streaming.errors import ConfigurationError
from streaming.log import check_layout
from streaming.settings import Settings
from streaming.sink import ChangeTopicSink
from streaming.source import SOURCE_NAME, LogDataSource
from streaming.views import CHANGE_SCHEMA

QUERY_NAME = "liveviews"
SINK_TIMEOUT_S = 600


def spark_conf(settings: Settings) -> dict[str, str]:
    conf = {
        "spark.sql.shuffle.partitions": str(settings.shuffle_partitions),
        "spark.driver.memory": settings.driver_memory,
        "spark.sql.streaming.stateStore.providerClass": (
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
        ),
        "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.driver.extraJavaOptions": "-Duser.timezone=UTC",
    }
    conf.update(settings.spark_conf)
    return conf


def build_session(settings: Settings) -> SparkSession:
    """A SparkSession on ``SPARK_MASTER``, with the log source registered."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.master(settings.spark_master).appName(QUERY_NAME)
    for k, v in spark_conf(settings).items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    spark.dataSource.register(LogDataSource)
    return spark


def read_log(spark: SparkSession, settings: Settings) -> DataFrame:
    return (
        spark.readStream.format(SOURCE_NAME)
        .option("url", settings.store_url)
        .option("partitions", str(settings.log_partitions))
        .option("maxEventsPerBatch", str(settings.max_events_per_batch))
        .option("readTasks", str(settings.read_tasks))
        .load()
    )


def changes(app: App, raw: DataFrame) -> DataFrame:
    """Every pipeline's changes, plus the source's read markers (``view`` null)."""
    if not app.pipelines:
        raise ConfigurationError(f"application {app.name!r} declares no pipeline.")
    events = raw.where(F.col("type").isNotNull())
    columns = [f.name for f in CHANGE_SCHEMA.fields]
    outputs = [p.build(events).select(*columns) for p in app.pipelines.values()]
    markers = raw.where(F.col("type").isNull()).select("partition", "offset")
    out = reduce(lambda a, b: a.unionByName(b), outputs)
    return out.unionByName(markers, allowMissingColumns=True)


def start(spark: SparkSession, app: App, settings: Settings) -> StreamingQuery:
    # A backlog batch is one transaction of up to LV_MAX_EVENTS_PER_BATCH events' changes, which
    # can take longer than redis-py's default 5 s socket timeout.
    # Retrying a whole batch is safe: the sink skips what a lost reply had already applied.
    client = redis.Redis.from_url(
        settings.store_url,
        socket_timeout=SINK_TIMEOUT_S,
        retry=Retry(ExponentialBackoff(cap=10), 5),
        retry_on_error=[redis.ConnectionError, redis.TimeoutError],
    )
    check_layout(client, settings.log_partitions, settings.change_shards)
    sink = ChangeTopicSink(
        client, app, QUERY_NAME, settings.change_shards, settings.change_retention
    )
    return (
        changes(app, read_log(spark, settings))
        .writeStream.queryName(QUERY_NAME)
        .outputMode("update")
        .foreachBatch(sink)
        .option("checkpointLocation", str(settings.checkpoint_dir / QUERY_NAME))
        .trigger(processingTime=settings.trigger_interval)
        .start()
    )
