"""Settings of the pipeline process, read once from the environment.

Every value has a default that runs the whole system on one machine: an embedded
Redis-compatible store in ``./data``, Spark in local mode, and the Chirp demo application.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from liveviews.errors import ConfigurationError
from liveviews.log.retention import Retention
from liveviews.store.password import embedded_url, store_password

DEFAULT_EMBEDDED_PORT = 6390
MAX_NICENESS = 19
"""The highest niceness Linux gives a process."""
LOG_LEVELS = ("debug", "info", "warning", "error")
"""``LV_LOG_LEVEL``: what each process's console shows (liveviews.console)."""


def env_int(env: dict[str, str], name: str, default: int, minimum: int = 1) -> int:
    """A whole-number setting, with a message naming the variable when it is not one."""
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        if not raw.isascii():  # int() would read "٣" as 3
            raise ValueError
        value = int(raw)
    except ValueError:
        raise ConfigurationError(f"{name} must be a whole number, not {raw!r}.") from None
    if value < minimum:
        raise ConfigurationError(f"{name} must be at least {minimum}, not {value}.")
    return value


def env_bool(env: dict[str, str], name: str, default: bool) -> bool:
    """An on/off setting (also true/false, yes/no, 1/0), with a message naming the variable
    when it is none of them."""
    raw = (env.get(name) or "").strip().lower()
    if raw == "":
        return default
    if raw in ("1", "true", "yes", "on"):
        return True
    if raw in ("0", "false", "no", "off"):
        return False
    raise ConfigurationError(f"{name} must be on or off (true or false), not {raw!r}.")


def env_log_level(env: dict[str, str]) -> str:
    """``LV_LOG_LEVEL`` (``info`` by default), with a message saying what each level shows."""
    raw = (env.get("LV_LOG_LEVEL") or "info").strip().lower()
    if raw not in LOG_LEVELS:
        raise ConfigurationError(
            f"LV_LOG_LEVEL must be debug, info, warning or error, not {raw!r}: 'info' shows each "
            "process's start, readiness and errors, 'debug' adds Spark's and the libraries' "
            "routine lines, 'warning' and 'error' show only what is at least that serious."
        )
    return raw


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
    def from_env(cls, env: dict[str, str] | None = None) -> Settings:
        env = dict(os.environ if env is None else env)
        data_dir = Path(env.get("LV_DATA_DIR") or "data").resolve()
        spark_conf = {
            spark_setting_name(k[len("LV_SPARK_CONF_") :]): v
            for k, v in env.items()
            if k.startswith("LV_SPARK_CONF_")
        }
        return cls(
            redis_url=env.get("REDIS_URL") or None,
            data_dir=data_dir,
            embedded_port=env_int(env, "LV_EMBEDDED_PORT", DEFAULT_EMBEDDED_PORT),
            log_partitions=env_int(env, "LV_LOG_PARTITIONS", 4),
            change_shards=env_int(env, "LV_CHANGE_SHARDS", 16),
            change_retention=env_int(env, "LV_CHANGE_RETENTION", 10_000, minimum=10),
            app=env.get("LV_APP") or "demo.chirp:app",
            spark_master=env.get("SPARK_MASTER") or default_master(),
            checkpoint_dir=Path(env.get("LV_CHECKPOINT_DIR") or data_dir / "checkpoints"),
            trigger_interval=env.get("LV_TRIGGER_INTERVAL") or "0 seconds",
            shuffle_partitions=env_int(env, "LV_SHUFFLE_PARTITIONS", 2),
            max_events_per_batch=env_int(env, "LV_MAX_EVENTS_PER_BATCH", 100_000),
            wait_for_store=env_int(env, "LV_WAIT_FOR_STORE", 0, minimum=0),
            read_tasks=env_int(env, "LV_READ_TASKS", 0, minimum=0),
            driver_memory=env.get("LV_DRIVER_MEMORY") or "4g",
            spark_conf=spark_conf,
            class_archive=env.get("LV_CLASS_ARCHIVE") or "",
            dump_class_archive=Path(env["LV_CLASS_ARCHIVE_DUMP"])
            if env.get("LV_CLASS_ARCHIVE_DUMP")
            else None,
            python_launcher=env_bool(env, "LV_PYTHON_LAUNCHER", True),
            log_level=env_log_level(env),
            log_retention=Retention.parse(env.get("LV_LOG_RETENTION")),
            rebuild_switch=rebuild_switch(env),
            rebuild_switch_distance=env_int(env, "LV_REBUILD_SWITCH_DISTANCE", 100, minimum=0),
            rebuild_grace_seconds=env_int(env, "LV_REBUILD_GRACE_SECONDS", 60, minimum=0),
            rebuild_max_events_per_batch=env_int(env, "LV_REBUILD_MAX_EVENTS_PER_BATCH", 10_000),
            rebuild_niceness=rebuild_niceness(env),
            rebuild_idle=rebuild_idle(env),
            store_ack_replicas=env_int(env, "LV_STORE_ACK_REPLICAS", 0, minimum=0),
        )


def default_master() -> str:
    """Twice as many task slots as cores: Spark never preempts a task, so with one slot per
    core a rebuild's long tasks would hold every slot while the serving queries' small batches
    wait (docs/performance/rebuild.md); with more slots the kernel shares the cores instead."""
    return f"local[{2 * (os.cpu_count() or 1)}]"


def rebuild_niceness(env: dict[str, str]) -> int:
    if rebuild_idle(env):
        return MAX_NICENESS
    try:
        value = int(env.get("LV_REBUILD_NICENESS") or "")
    except ValueError:
        value = -1
    if not 0 <= value <= MAX_NICENESS:
        raise ConfigurationError(
            f"LV_REBUILD_NICENESS={env.get('LV_REBUILD_NICENESS')}: write a niceness from 0"
            f" (build in the pipeline process) to {MAX_NICENESS} (the lowest CPU priority),"
            " or idle (only the CPU no other process wants)."
        )
    return value


def rebuild_idle(env: dict[str, str]) -> bool:
    return (env.get("LV_REBUILD_NICENESS") or "idle").strip().lower() == "idle"


def rebuild_switch(env: dict[str, str]) -> str:
    value = (env.get("LV_REBUILD_SWITCH") or "auto").strip().lower()
    if value not in ("auto", "manual"):
        raise ConfigurationError(
            f"LV_REBUILD_SWITCH={value!r}: write auto (switch readers once a rebuilt version"
            " has caught up) or manual (when an operator runs liveviews switch)."
        )
    return value
