"""Settings of the pipeline process, read once from the environment and the settings file
(``liveviews.config``).

Every value has a default that runs the whole system on one machine: an embedded
Redis-compatible store in ``./data``, Spark in local mode, and the Chirp demo application.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from liveviews.config import catalog as C
from liveviews.config.layers import SPARK_CONF_PREFIX, environment
from liveviews.config.values import MAX_NICENESS
from liveviews.errors import ConfigurationError
from liveviews.log.kafka.topic import LOG_TOPIC
from liveviews.log.retention import Retention
from liveviews.store.password import embedded_url, store_password


def spark_setting_name(name: str) -> str:
    """The Spark setting an ``LV_SPARK_CONF_<NAME>`` variable sets: ``__`` stands for ``.``.

    A name in capitals is lowercased (``SPARK__EXECUTOR__MEMORY``: ``spark.executor.memory``);
    any other name keeps its case, for Spark's camel-case settings
    (``spark__eventLog__enabled``: ``spark.eventLog.enabled``).
    """
    dotted = name.replace("__", ".")
    return dotted.lower() if dotted == dotted.upper() else dotted


@dataclass(frozen=True)
class Settings:
    """Where the log and change topic live, and how the Spark job runs."""

    redis_url: str | None
    data_dir: Path
    embedded_port: int
    log_partitions: int
    change_shards: int
    change_retention: int
    app: str
    spark_master: str
    checkpoint_dir: Path
    trigger_interval: str
    realtime: bool
    """Pipelines declared ``realtime=True`` run in Real-Time Mode (``LV_REALTIME=on``)."""
    realtime_interval: str
    """Their epochs, when they declare no ``trigger_interval`` (``LV_REALTIME_INTERVAL``)."""
    shuffle_partitions: int
    max_events_per_batch: int
    wait_for_store: int
    read_tasks: int
    driver_memory: str
    spark_conf: dict[str, str] = field(default_factory=dict)
    class_archive: str = ""
    """The JVM class archive: "" for the default file, "off", or a path
    (liveviews.pipeline.tuning.classarchive)."""
    dump_class_archive: Path | None = None
    """Write the class archive here when the JVM exits (set by its builder only)."""
    python_launcher: bool = True
    """Spark's Python processes import the installed PySpark
    (liveviews.pipeline.tuning.pythonlauncher)."""
    log_level: str = "info"
    """What the console shows: one of ``LOG_LEVELS`` (liveviews.console)."""
    log_retention: Retention | None = None
    """How much of each log partition an append keeps (``LV_LOG_RETENTION``); None: all."""
    rebuild_switch: str = "auto"
    """``auto``: readers move to a rebuilt version once it has caught up; ``manual``: when an
    operator runs ``liveviews switch`` (``LV_REBUILD_SWITCH``)."""
    rebuild_switch_distance: int = 100
    """A rebuilt version has caught up within this many events of the serving one."""
    rebuild_grace_seconds: float = 60.0
    """How long a replaced version's state is kept before it is deleted."""
    rebuild_max_events_per_batch: int = 10_000
    """A version being built reads at most this many events per micro-batch, so that its tasks
    are short and the serving versions' batches find a free task slot
    (docs/performance/rebuild.md)."""
    rebuild_niceness: int = MAX_NICENESS
    """On a local master, a version being built runs in a process of its own this much nicer
    than the pipeline process (``liveviews.pipeline.builder``), so that the kernel gives the cores
    to the serving versions first; 0 builds it in the pipeline process."""
    rebuild_idle: bool = True
    """``LV_REBUILD_NICENESS=idle``, the default: the builder also runs in the kernel's idle
    class (``SCHED_IDLE``), so that a serving thread that wakes takes its core at once
    (docs/performance/rebuild.md)."""
    kafka: str | None = None
    """The bootstrap servers of a Kafka log the pipelines read with Spark's Kafka source
    (``liveviews.pipeline.kafkalog``), in ``kafka_topic``; None: the log is in the store's
    Redis Streams."""
    kafka_topic: str = LOG_TOPIC
    store_ack_replicas: int = 0
    """Replicas that must have each acknowledged write (an event's 202, a committed
    micro-batch) before it is acknowledged: ``WAIT N`` after it (``LV_STORE_ACK_REPLICAS``);
    0 acknowledges once the primary has it."""

    @property
    def store_url(self) -> str:
        """The configured server, or the embedded one's address when none is configured, with
        its password (made on first use): give it to clients, never to a log (``redacted``)."""
        if self.redis_url:
            return self.redis_url
        return embedded_url(self.embedded_port, store_password(self.data_dir))

    @property
    def embedded(self) -> bool:
        return self.redis_url is None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = environment(env)
        data_dir = Path(C.DATA_DIR.get(env)).resolve()
        spark_conf = {
            spark_setting_name(k[len(SPARK_CONF_PREFIX) :]): v
            for k, v in env.items()
            if k.startswith(SPARK_CONF_PREFIX)
        }
        niceness = C.REBUILD_NICENESS.get(env)
        kafka = C.KAFKA.read(env)
        if kafka and importlib.util.find_spec("confluent_kafka") is None:
            raise ConfigurationError(
                "LV_KAFKA needs the Kafka client confluent-kafka, which is not installed: pip "
                "install 'liveviews[kafka]'."
            )
        if kafka and C.LOG_RETENTION.read(env) is not None:
            raise ConfigurationError(
                "LV_LOG_RETENTION trims the store's log, and with LV_KAFKA the log is Kafka's "
                "topic, kept forever; unset LV_LOG_RETENTION (set retention.ms or retention.bytes "
                "on the topic if history should be dropped)."
            )
        return cls(
            redis_url=C.REDIS_URL.read(env),
            data_dir=data_dir,
            embedded_port=C.EMBEDDED_PORT.get(env),
            log_partitions=C.LOG_PARTITIONS.get(env),
            change_shards=C.CHANGE_SHARDS.get(env),
            change_retention=C.CHANGE_RETENTION.get(env),
            app=C.APP.get(env),
            spark_master=C.SPARK_MASTER.read(env) or default_master(),
            checkpoint_dir=Path(C.CHECKPOINT_DIR.read(env) or data_dir / "checkpoints"),
            trigger_interval=C.TRIGGER_INTERVAL.get(env),
            realtime=C.REALTIME.get(env) == "on",
            realtime_interval=C.REALTIME_INTERVAL.get(env),
            shuffle_partitions=C.SHUFFLE_PARTITIONS.get(env),
            max_events_per_batch=C.MAX_EVENTS_PER_BATCH.get(env),
            wait_for_store=C.WAIT_FOR_STORE.get(env),
            read_tasks=C.READ_TASKS.get(env),
            driver_memory=C.DRIVER_MEMORY.get(env),
            spark_conf=spark_conf,
            class_archive=C.CLASS_ARCHIVE.read(env) or "",
            dump_class_archive=Path(dump) if (dump := C.CLASS_ARCHIVE_DUMP.read(env)) else None,
            python_launcher=C.PYTHON_LAUNCHER.get(env),
            log_level=C.LOG_LEVEL.get(env),
            log_retention=C.LOG_RETENTION.read(env),
            rebuild_switch=C.REBUILD_SWITCH.get(env),
            rebuild_switch_distance=C.REBUILD_SWITCH_DISTANCE.get(env),
            rebuild_grace_seconds=C.REBUILD_GRACE_SECONDS.get(env),
            rebuild_max_events_per_batch=C.REBUILD_MAX_EVENTS_PER_BATCH.get(env),
            rebuild_niceness=MAX_NICENESS if niceness == "idle" else int(niceness),
            rebuild_idle=niceness == "idle",
            store_ack_replicas=C.STORE_ACK_REPLICAS.get(env),
            kafka=kafka,
            kafka_topic=C.KAFKA_TOPIC.get(env),
        )


def default_master() -> str:
    """Twice as many task slots as cores: Spark never preempts a task, so with one slot per
    core a rebuild's long tasks would hold every slot while the serving queries' small batches
    wait (docs/performance/rebuild.md); with more slots the kernel shares the cores instead."""
    return f"local[{2 * (os.cpu_count() or 1)}]"
