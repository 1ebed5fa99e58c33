"""The Spark job: one streaming query per pipeline of the application, all in one driver.

Each query reads the log, runs its pipeline, and writes the pipeline's changes through a
``ChangeTopicSink``, which commits each micro-batch to the change topic exactly once and
advances the pipeline's frontier to where the batch ends in the log (``streaming.offsetlog``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import redis
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from streaming import classarchive, localdir, localfs, pythonlauncher, rocksdblib
from streaming.app import App, Pipeline
from streaming.changes import VIEWS_FRONTIER
from streaming.errors import ConfigurationError
from streaming.log import check_layout
from streaming.offsetlog import BatchEnds
from streaming.progress import record_progress
from streaming.settings import Settings
from streaming.sink import ChangeTopicSink
from streaming.source import SOURCE_NAME, LogDataSource, store_retry
from streaming.views import CHANGE_SCHEMA

QUERY_NAME = "liveviews"
SINK_TIMEOUT_S = 600
JAVA_OPTIONS = "spark.driver.extraJavaOptions"
CLASS_PATH = "spark.driver.extraClassPath"
SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"
CHECKPOINT_FILE_MANAGER = "spark.sql.streaming.checkpointFileManagerClass"
UNIX_SOCKETS = "spark.python.unix.domain.socket.enabled"
WHOLE_STAGE_CODEGEN = "spark.sql.codegen.wholeStage"
PYTHON_DAEMON = "spark.python.daemon.module"
FILE_SYSTEM_CHECKPOINTS = (
    "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"
)


DRIVER_JIT_OPTIONS = [
    "-XX:Tier4InvocationThreshold=20000",
    "-XX:Tier4MinInvocationThreshold=5000",
    "-XX:Tier4CompileThreshold=25000",
    "-XX:Tier4BackEdgeThreshold=100000",
]
"""The JIT's optimizing compiler (C2) waits for four times the calls and loops it waits for by
default. At start the driver runs a burst of code once per query (analysis, planning, the
first batch), and on two cores C2 compiling that code took CPU from the start itself; what
stays hot is still compiled. Measured on the reference machine: the first batch done ~1-2 s
sooner, steady-state batches no slower (docs/PERFORMANCE.md). Compiling with C1 only started
sooner still, but left every later batch ~25% slower."""


def spark_conf(settings: Settings) -> dict[str, str]:
    conf = {
        SHUFFLE_PARTITIONS: str(settings.shuffle_partitions),
        "spark.driver.memory": settings.driver_memory,
        "spark.sql.streaming.stateStore.providerClass": (
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
        ),
        "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
        # Checkpoint files (offset and commit logs, state changelogs) are written through
        # Hadoop's FileSystem API rather than its FileContext API. On a local disk without
        # Hadoop's native library, a FileContext rename starts two `readlink` processes from
        # the JVM (it checks both paths for symbolic links): ~14 per micro-batch, and ~40-60 ms
        # of each of the two log writes. Each file is still written whole
        # to a temporary file and renamed into place (docs/PERFORMANCE.md).
        CHECKPOINT_FILE_MANAGER: FILE_SYSTEM_CHECKPOINTS,
        # The JVM talks to its Python processes over Unix domain sockets, not TCP on the
        # loopback: a stateful operator's Python worker makes ~3 round trips to the JVM's state
        # server per key, and each costs less (micro-batches ~12-17% shorter at 100 events/s in
        # one comparison, within the machine's drift in another: docs/PERFORMANCE.md). Every
        # such process runs on the same machine as its JVM.
        UNIX_SOCKETS: "true",
        # Operators run as Spark's interpreted iterators, not as Java source that Janino
        # compiles per stage: the pipeline's work is in its Python operators and the sink, and
        # in a cold JVM compiling each stage of the first micro-batches cost ~1.8 s of every
        # start (cold start 17.3 s against 19.1 s, three alternating pairs); a 200k-event
        # drain and the batches at 100 events/s were no slower (docs/PERFORMANCE.md).
        WHOLE_STAGE_CODEGEN: "false",
        # Python workers forked by a daemon that keeps what each worker imported out of the
        # full collection PySpark runs between two tasks (streaming/pydaemon.py): ~0.4 of a
        # core for the views' workers at 100 events/s, ~0.17 with it.
        PYTHON_DAEMON: "streaming.pydaemon",
        # The events the driver reads for a batch wait in Spark's block manager, serialized,
        # until the batch's tasks take them. Java serialization of each row was ~30% of the
        # driver JVM's samples in a drain; with Kryo the JVM used 8-28% less CPU in three
        # alternating pairs of 200k-event drains (docs/PERFORMANCE.md).
        "spark.serializer": "org.apache.spark.serializer.KryoSerializer",
        # Each query's jobs in a pool of their own: a backlog batch of one pipeline does not
        # hold back the small batches of another.
        "spark.scheduler.mode": "FAIR",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.session.timeZone": "UTC",
        # The class archive and the JIT thresholds are for the driver JVM only: executors on a
        # cluster start their own JVMs, and local mode runs its tasks in the driver's.
        JAVA_OPTIONS: " ".join(
            ["-Duser.timezone=UTC", *DRIVER_JIT_OPTIONS, *classarchive.java_options(settings)]
        ),
    }
    # Checkpoint files on a local disk without a chmod process per file (streaming/localfs.py).
    conf.update(localfs.spark_conf(settings.spark_master, localfs.jar_path()))
    # RocksDB's library loaded from one extracted copy, not copied to /tmp at every start
    # (streaming/rocksdblib.py).
    conf.update(rocksdblib.spark_conf(settings.spark_master, rocksdblib.library_dir()))
    own = dict(settings.spark_conf)
    # The user's JVM options come after ours, so that each of them wins (the JVM keeps the
    # last of a repeated option) without turning off the class archive and the rest; the
    # user's class path and library path are added to ours, which the local file system's
    # class and RocksDB's library need.
    java_options = own.pop(JAVA_OPTIONS, None)
    paths = {name: own.pop(name, None) for name in (CLASS_PATH, rocksdblib.LIBRARY_PATH)}
    conf.update(own)
    if java_options:
        conf[JAVA_OPTIONS] = f"{conf[JAVA_OPTIONS]} {java_options}"
    for name, path in paths.items():
        if path:
            conf[name] = os.pathsep.join(filter(None, [conf.get(name), path]))
    return conf


def build_session(settings: Settings) -> SparkSession:
    """A SparkSession on ``SPARK_MASTER``, with the log source registered."""
    pythonlauncher.configure(settings.spark_master, settings.python_launcher)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    localfs.ensure_jar()
    rocksdblib.ensure_library()
    builder = SparkSession.builder.master(settings.spark_master).appName(QUERY_NAME)
    conf = spark_conf(settings)
    # Scratch files under the data directory, per process; a killed one's removed at start.
    conf.update(localdir.spark_conf(settings.spark_master, settings.data_dir, settings.spark_conf))
    for k, v in conf.items():
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


def changes(pipeline: Pipeline, events: DataFrame) -> DataFrame:
    """A pipeline's changes, in the columns the sink takes."""
    return pipeline.build(events).select(*[f.name for f in CHANGE_SCHEMA.fields])


def checkpoint_of(settings: Settings, pipeline: str) -> Path:
    return settings.checkpoint_dir / pipeline


def start(spark: SparkSession, app: App, settings: Settings) -> list[StreamingQuery]:
    """One query per pipeline, each with its own checkpoint, source and frontier.

    A pipeline's micro-batches then wait only for its own operators: a small batch of the
    Chirp entities no longer waits for the activity windows, and the reverse.
    """
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
    # A backlog batch writes up to LV_MAX_EVENTS_PER_BATCH events' changes, in calls that can
    # take longer than redis-py's default 5 s socket timeout.
    # Retrying a whole batch is safe: the sink skips what a lost reply had already applied.
    client = redis.Redis.from_url(
        settings.store_url,
        socket_timeout=SINK_TIMEOUT_S,
        retry=store_retry(),  # a restarting store pauses the batch instead of failing it
        retry_on_error=[redis.ConnectionError, redis.TimeoutError],
    )
    check_layout(client, settings.log_partitions, settings.change_shards)
    names = list(app.pipelines)
    ends = BatchEnds(spark)
    partitions = str(spark.conf.get(SHUFFLE_PARTITIONS))  # LV_SHUFFLE_PARTITIONS or the user's
    record_progress(spark, client)
    queries = []
    for name, pipeline in app.pipelines.items():
        sink = ChangeTopicSink(
            client, app, name, settings.change_shards, settings.change_retention, names, ends
        )
        spark.sparkContext.setLocalProperty("spark.scheduler.pool", name)
        # A query takes the session's settings as they are when it starts; a new checkpoint
        # records this count, which the query then keeps.
        spark.conf.set(SHUFFLE_PARTITIONS, str(pipeline.partitions or partitions))
        query = (
            changes(pipeline, read_log(spark, settings))
            .writeStream.queryName(f"{QUERY_NAME}.{name}")
            .outputMode("update")
            .foreachBatch(sink)
            .option("checkpointLocation", str(checkpoint_of(settings, name)))
            .trigger(processingTime=pipeline.trigger_interval or settings.trigger_interval)
            .start()
        )
        queries.append(query)
    spark.sparkContext.setLocalProperty("spark.scheduler.pool", None)  # type: ignore[arg-type]
    spark.conf.set(SHUFFLE_PARTITIONS, partitions)
    return queries
