"""The job's SparkSession: Spark's settings for the pipeline, and its optional local tuning.

Which settings and why each, in a sentence or two beside it; the start-up tuning that only
local mode uses (``liveviews.pipeline.tuning``) is switched on here and nowhere else.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path

from pyspark.sql import SparkSession

from liveviews import console
from liveviews.errors import LiveviewsError
from liveviews.pipeline import kafkalog
from liveviews.pipeline.cluster import (
    check_checkpoints,
    driver_runners_import,
    is_local,
    pack_shipped,
    ship_code,
)
from liveviews.pipeline.realtime import jar as realtime_jar
from liveviews.pipeline.settings import Settings
from liveviews.pipeline.source import LogDataSource
from liveviews.pipeline.tuning import classarchive, localdir, localfs, pythonlauncher, rocksdblib

QUERY_NAME = "liveviews"
JAVA_OPTIONS = "spark.driver.extraJavaOptions"
CLASS_PATH = "spark.driver.extraClassPath"
SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"
CHECKPOINT_FILE_MANAGER = "spark.sql.streaming.checkpointFileManagerClass"
UNIX_SOCKETS = "spark.python.unix.domain.socket.enabled"
WHOLE_STAGE_CODEGEN = "spark.sql.codegen.wholeStage"
CODEGEN_FACTORY_MODE = "spark.sql.codegen.factoryMode"
PYTHON_DAEMON = "spark.python.daemon.module"
FILE_SYSTEM_CHECKPOINTS = (
    "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"
)
LOG4J2_CONFIG = Path(__file__).with_name("log4j2.properties")

log = logging.getLogger("liveviews.pipeline")


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
        # Projections, orderings and predicates are interpreted too, not generated as Java
        # source for each task: Spark generates that source again for every task of every
        # micro-batch to look it up in its cache of compiled classes, and at 100 events/s that
        # was ~25% of the driver JVM's samples (JFR, Chirp's three queries). An internal
        # setting of Spark's; LV_SPARK_CONF_spark__sql__codegen__factoryMode=FALLBACK gives
        # back Spark's default (docs/performance/latency.md).
        CODEGEN_FACTORY_MODE: "NO_CODEGEN",
        # The events the driver reads for a batch wait in Spark's block manager, serialized,
        # until the batch's tasks take them. Java serialization of each row was ~30% of the
        # driver JVM's samples in a drain; with Kryo the JVM used 8-28% less CPU in three
        # alternating pairs of 200k-event drains (docs/PERFORMANCE.md).
        "spark.serializer": "org.apache.spark.serializer.KryoSerializer",
        # Each query's jobs in a pool of their own: a backlog batch of one pipeline does not
        # hold back the small batches of another.
        "spark.scheduler.mode": "FAIR",
        # Real-Time Mode's epochs may be as short as a second (Spark's floor is 5 s): a
        # pipeline that declares a shorter trigger_interval checkpoints more often, and replays
        # less after a failure (docs/REALTIME.md).
        "spark.sql.streaming.realTimeMode.minBatchDuration": "1s",
        # Real-Time Mode's shuffle sends a partly filled buffer after this wait (Spark: 50 ms,
        # which was most of a delta's ~40 ms p50 at 100 events/s here): a record crosses it
        # as soon as it comes, in smaller messages (docs/REALTIME.md).
        "spark.shuffle.streaming.networkBufferMaxWaitTimeMs": "5",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.session.timeZone": "UTC",
        # The class archive and the JIT thresholds are for the driver JVM only: executors on a
        # cluster start their own JVMs, and local mode runs its tasks in the driver's.
        JAVA_OPTIONS: " ".join(
            ["-Duser.timezone=UTC", *DRIVER_JIT_OPTIONS, *classarchive.java_options(settings)]
        ),
    }
    if is_local(settings.spark_master):
        # Python workers forked by a daemon that keeps what each worker imported out of the
        # full collection PySpark runs between two tasks (streaming/pipeline/tuning/pydaemon.py):
        # ~0.4 of a core for the views' workers at 100 events/s, ~0.17 with it. Local mode only: an
        # executor starts its daemon before the shipped code is on its path.
        conf[PYTHON_DAEMON] = "liveviews.pipeline.tuning.pydaemon"
    # Checkpoint files on a local disk without a chmod process per file
    # (streaming/pipeline/tuning/localfs.py).
    conf.update(localfs.spark_conf(settings.spark_master, localfs.jar_path()))
    # The Real-Time Mode source and writer (streaming/pipeline/realtime/), once built: beside
    # the local file system's jar on the class path.
    realtime = realtime_jar.spark_conf(settings.spark_master, realtime_jar.jar_path())
    for name, value in realtime.items():
        sep = "," if name == "spark.jars" else os.pathsep
        conf[name] = sep.join(filter(None, [conf.get(name), value]))
    # Spark's Kafka source, for a Kafka log, once fetched (scripts/setup.sh): every session has
    # it, since a session outlives a change of log (a test run has one session).
    for name, value in kafkalog.spark_conf(kafkalog.connector_jars()).items():
        conf[name] = ",".join(filter(None, [conf.get(name), value]))
    # RocksDB's library loaded from one extracted copy, not copied to /tmp at every start
    # (streaming/pipeline/tuning/rocksdblib.py).
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


def java_log_options(settings: Settings, process: str = "pipeline") -> list[str]:
    """The driver JVM's logging (log4j2.properties): Spark's routine lines to the log file of
    ``process`` (its own: two JVMs rolling one file would lose lines), only errors to the
    console; with ``LV_LOG_LEVEL=debug``, its INFO lines to both."""
    debug = settings.log_level == "debug"
    return [
        f"-Dlog4j2.configurationFile={LOG4J2_CONFIG}",
        f"-Dliveviews.log.file={console.log_file(process, settings)}",
        f"-Dliveviews.log.level={'info' if debug else 'warn'}",
        f"-Dliveviews.log.console={'info' if debug else 'error'}",
    ]


@contextlib.contextmanager
def driver_stderr(settings: Settings, process: str = "pipeline") -> Iterator[None]:
    """A driver JVM started in this block writes its stderr to the log file of ``process``.

    The JVM copies to its stderr what the Python processes it starts print (a TransformWithState
    worker announces each start and each call of its function; a worker daemon prints the
    traceback of a socket Spark closed), and the JVM prints notices of its own there; a failure
    of the pipeline's reaches the console through the query's error. log4j's console lines go
    to stdout (log4j2.properties). With ``LV_LOG_LEVEL=debug`` all of it stays on the console.
    """
    if settings.log_level == "debug":
        yield
        return
    path = console.log_file(process, settings)
    path.parent.mkdir(parents=True, exist_ok=True)
    sys.stderr.flush()
    saved = os.dup(2)
    target = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.dup2(target, 2)  # the launcher's child inherits descriptor 2 as it stands now
    started = False
    try:
        yield
        started = True
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        os.close(target)
        if not started:
            log.error("the Spark driver did not start; what it printed is in %s",
                      console.shown(path))  # fmt: skip


def build_session(settings: Settings, process: str = "pipeline") -> SparkSession:
    """A SparkSession on ``SPARK_MASTER``, with the log source registered; its driver logs to
    the log file of ``process``."""
    pythonlauncher.configure(settings.spark_master, settings.python_launcher)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    localfs.ensure_jar()
    rocksdblib.ensure_library()
    try:
        realtime_jar.ensure_jar()
    except LiveviewsError as exc:  # a pipeline that asks for Real-Time Mode says so at start
        log.info("no Real-Time Mode jar: %s", exc)
    builder = SparkSession.builder.master(settings.spark_master).appName(QUERY_NAME)
    conf = spark_conf(settings)
    # Scratch files under the data directory, per process; a killed one's removed at start.
    conf.update(localdir.spark_conf(settings.spark_master, settings.data_dir, settings.spark_conf))
    # The logging options first, so that any the user gives (their own
    # -Dlog4j2.configurationFile, say), which come after the pipeline's, win.
    conf[JAVA_OPTIONS] = " ".join([*java_log_options(settings, process), conf[JAVA_OPTIONS]])
    for k, v in conf.items():
        builder = builder.config(k, v)
    # The log levels are log4j2.properties' (or the user's own configuration's): no
    # setLogLevel here, which would override them.
    # Executors import the views' code by name: it goes to them with the session, and the
    # checkpoints must be where they all see them (streaming/pipeline/cluster.py).
    shipped = (
        None if is_local(settings.spark_master) else pack_shipped(settings.app, settings.data_dir)
    )
    with (
        driver_stderr(settings, process),
        contextlib.nullcontext() if shipped is None else driver_runners_import(shipped),
    ):
        spark = builder.getOrCreate()
    if shipped is not None:
        ship_code(spark, shipped)
        log.info("shipped %s to the executors", console.shown(shipped))
        check_checkpoints(spark, settings.checkpoint_dir)
    spark.dataSource.register(LogDataSource)
    return spark
