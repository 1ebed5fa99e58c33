"""The whole system for a benchmark: an embedded store, the Spark pipeline and the gateway,
each in its own process as ``make run`` starts them, in a temporary data directory; the log in
the store's streams, or on a Kafka node of the run's own (``running_store(kafka=True)``)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import redis

from bench.common import free_port, wait_listening
from demo.chirp import app
from liveviews.changes.topic import FRONTIER_KEY, VIEWS_FRONTIER, read_frontier
from liveviews.log.eventlog import EventLog, log_heads, views_caught_up
from liveviews.log.events import log_stream
from liveviews.log.kafka.topic import LOG_TOPIC
from liveviews.log.writer import LogWriter
from liveviews.store.embedded import EmbeddedStore

ROOT = Path(__file__).resolve().parent.parent

UNTUNED = {
    # What a user gets from Spark without Liveviews' tuning: 200 shuffle partitions, full
    # RocksDB snapshots at every commit, one read task per log partition, checkpoint files
    # through Hadoop's FileContext API and its own local file system, Python workers on TCP,
    # whole-stage code generation.
    "LV_SHUFFLE_PARTITIONS": "200",
    "LV_READ_TASKS": "4",
    "LV_SPARK_CONF_SPARK__SQL__STREAMING__STATESTORE__ROCKSDB__CHANGELOGCHECKPOINTING__ENABLED": (
        "false"
    ),
    "LV_SPARK_CONF_spark__sql__streaming__checkpointFileManagerClass": (
        "org.apache.spark.sql.execution.streaming.checkpointing.FileContextBasedCheckpointFileManager"
    ),
    "LV_SPARK_CONF_spark__hadoop__fs__file__impl": "org.apache.hadoop.fs.LocalFileSystem",
    "LV_SPARK_CONF_spark__python__unix__domain__socket__enabled": "false",
    "LV_SPARK_CONF_spark__sql__codegen__wholeStage": "true",
}


PARTITIONS = 4
"""Log partitions of the benchmarks' stores (the default of ``LV_LOG_PARTITIONS``)."""
LOG_TAIL = 40
"""Lines of a pipeline's log an error quotes: the log goes with the run's folder."""

COMPILER_THREADS = ("C1 CompilerThre", "C2 CompilerThre")
"""How HotSpot's JIT compiler threads name themselves (``/proc/<pid>/task/<tid>/comm``)."""


_compiler_threads: dict[tuple[tuple[int, float], int], float] = {}
"""The CPU each JIT compiler thread had when last seen, by its JVM's pid and start time (a
pid can be reused) and its thread id."""


def jvm_cpu(pid: int) -> dict[str, float]:
    """CPU seconds a JVM has used so far: in all, and in its JIT compiler threads. HotSpot ends
    a compiler thread it no longer needs (with C1 alone it runs two on two cores, and the
    second comes and goes), so a thread seen before counts with the CPU it had then: an ended
    one would otherwise take its CPU out of a later figure."""
    process = psutil.Process(pid)
    jvm = (pid, process.create_time())
    times = process.cpu_times()
    for thread in process.threads():
        try:
            name = Path(f"/proc/{pid}/task/{thread.id}/comm").read_text()
        except OSError:  # the thread ended since
            continue
        if name.startswith(COMPILER_THREADS):
            _compiler_threads[jvm, thread.id] = thread.user_time + thread.system_time
    jit = sum(cpu for (owner, _), cpu in _compiler_threads.items() if owner == jvm)
    return {"cpu_s": times.user + times.system, "jit_cpu_s": jit}


@dataclass
class System:
    store_url: str
    client: redis.Redis
    data: Path
    base: str = ""
    gateway: subprocess.Popen[bytes] | None = None
    pipeline: subprocess.Popen[bytes] | None = None
    kafka: str = ""
    """The Kafka log's bootstrap servers, if the log is on Kafka (``LV_KAFKA``)."""
    topic: str = LOG_TOPIC

    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        log = {"LV_KAFKA": self.kafka, "LV_KAFKA_TOPIC": self.topic} if self.kafka else {}
        return {**os.environ, "REDIS_URL": self.store_url, "LV_DATA_DIR": str(self.data),
                "PYTHONPATH": str(ROOT), **log, **(extra or {})}  # fmt: skip

    def writer(self) -> LogWriter:
        """A writer of Chirp's events to the system's log."""
        if self.kafka:
            from liveviews.log.kafka.append import KafkaEventLog

            return KafkaEventLog(self.kafka, app, PARTITIONS, self.client, topic=self.topic)
        return EventLog(self.client, app, PARTITIONS)

    def log_positions(self) -> int:
        """How far the log goes: its events on the store's streams; on Kafka, each partition's
        next offset (a transaction's commit marker takes one too)."""
        if self.kafka:
            return sum(int(end) for end in self.log_ends().values())
        return sum(int(self.client.xlen(log_stream(p))) for p in range(PARTITIONS))

    def caught_up(self) -> bool:
        """Whether the views reflect every event in the log."""
        if not self.kafka:
            return views_caught_up(self.client, PARTITIONS)
        from liveviews.log.kafka.lag import measure_all

        # By what lies behind the frontier, not by the partitions' ends: a query in Real-Time
        # Mode stops short of a trailing commit marker (liveviews.log.kafka.lag).
        frontier = {"views": read_frontier(self.client, VIEWS_FRONTIER)}
        return measure_all(self.kafka, self.topic, PARTITIONS, frontier)["views"].events == 0

    def start_pipeline(self, extra: dict[str, str] | None = None, name: str = "pipeline") -> None:
        log = open(self.data / f"{name}.log", "ab")  # noqa: SIM115 - the child owns it
        self.pipeline = subprocess.Popen(
            [sys.executable, "-m", "liveviews.pipeline"], cwd=ROOT, env=self.env(extra),
            stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip

    def driver_jvm(self) -> int | None:
        """The pid of the pipeline's driver JVM, which ``python -m liveviews.pipeline`` starts."""
        if self.pipeline is None:
            return None
        try:
            children = psutil.Process(self.pipeline.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return None
        return next((c.pid for c in children if c.name() == "java"), None)

    def stop_pipeline(self) -> None:
        if self.pipeline is not None:
            self.pipeline.terminate()
            try:
                self.pipeline.wait(60)
            except subprocess.TimeoutExpired:
                self.pipeline.kill()
                self.pipeline.wait()
            self.pipeline = None

    def start_gateway(self, extra: dict[str, str] | None = None) -> None:
        port = free_port()
        env = self.env({"LV_PORT": str(port), "LV_MAX_CONNECTIONS": "20000",
                        # The load comes from one address, as few users: no such caps.
                        "LV_MAX_CONNECTIONS_PER_SUBJECT": "0",
                        "LV_MAX_CONNECTIONS_PER_ADDRESS": "0",
                        "LV_SUBSCRIBER_BUFFER": "4096", **(extra or {})})  # fmt: skip
        log = open(self.data / "gateway.log", "ab")  # noqa: SIM115 - the child owns it
        self.gateway = subprocess.Popen(
            [sys.executable, "-m", "liveviews.gateway"], cwd=ROOT, env=env, stdout=log,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
        wait_listening(port, self.gateway, 60)
        self.base = f"http://127.0.0.1:{port}"

    def wait_until_caught_up(self, timeout: float = 300) -> None:
        """Until the views reflect every event in the log."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.caught_up():
                return
            if self.pipeline is not None and self.pipeline.poll() is not None:
                raise RuntimeError(self.exited())
            time.sleep(0.1)
        frontiers: Any = self.client.hgetall(FRONTIER_KEY)
        raise RuntimeError(
            f"the pipeline did not catch up within {timeout} s: log ends {self.log_ends()}, "
            f"frontiers { ({k.decode(): v.decode() for k, v in frontiers.items()}) }"
        )

    def exited(self) -> str:
        """Why the pipeline process exited, as far as the run can tell: its exit status, the
        store's memory, and the end of its log, which goes with the run's folder."""
        assert self.pipeline is not None
        try:
            memory: Any = self.client.info("memory")
            store = (f"the store used {memory.get('used_memory_human')} of maxmemory "
                     f"{memory.get('maxmemory_human')}")  # fmt: skip
        except redis.RedisError as exc:
            store = f"the store did not answer ({exc})"
        try:
            lines = (self.data / "pipeline.log").read_text(errors="replace").splitlines()
        except OSError:
            lines = []
        tail = "\n".join(lines[-LOG_TAIL:])
        return (f"the pipeline exited with status {self.pipeline.returncode}; {store}; the last "
                f"lines of its log:\n{tail}")  # fmt: skip

    def log_ends(self) -> dict[int, str]:
        """Each partition's end: its newest entry id, or on Kafka its next offset."""
        if self.kafka:
            from liveviews.log.kafka.lag import log_ends

            return {p: str(end) for p, end in log_ends(self.kafka, self.topic, PARTITIONS).items()}
        return log_heads(self.client, PARTITIONS)


@contextmanager
def running_store(kafka: bool = False) -> Iterator[System]:
    """An embedded store in a fresh temporary directory; with ``kafka``, and a Kafka node for
    the log (``liveviews.log.kafka.broker``)."""
    with tempfile.TemporaryDirectory(prefix="lv-bench-") as tmp, ExitStack() as stack:
        data = Path(tmp)
        port = free_port()
        store = EmbeddedStore(data / "store", port)
        store.start()
        client = redis.Redis.from_url(store.url, socket_timeout=60)
        system = System(store.url, client, data)
        try:
            if kafka:
                from liveviews.log.kafka.broker import KafkaCluster

                system.kafka = stack.enter_context(KafkaCluster(data / "kafka"))
            yield system
        finally:
            system.stop_pipeline()
            if system.gateway is not None:
                system.gateway.terminate()
                system.gateway.wait(20)
            client.close()
            store.stop()
