"""A Spark standalone cluster on one machine: a master and workers, each its own process,
started from the installed PySpark's own ``spark-class``.

``python -m deploy.spark`` starts one and keeps it up until stopped; tests start one per module
(``tests/support/sparkcluster.py``). The pipeline joins it with ``SPARK_MASTER=<master_url>``.

Workers start in directories of their own, without the caller's ``PYTHONPATH``: the
application's code reaches their executors only as the driver ships it
(``liveviews.pipeline.shipping``), as on machines that never saw the project.
"""

from __future__ import annotations

import contextlib
import enum
import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HOST = "127.0.0.1"
DAEMON_MEMORY = "256m"
"""The master's and each worker's own heap; executors get theirs from ``--memory``."""
STOP_TIMEOUT_S = 20.0


class ClusterError(RuntimeError):
    """The cluster could not start, or was used in a state that does not allow it."""


class State(enum.Enum):
    NEW = "new"
    RUNNING = "running"
    STOPPED = "stopped"


@dataclass
class Worker:
    """One worker process and what it offers to applications."""

    name: str
    process: subprocess.Popen[bytes]
    port: int
    cores: int
    memory: str
    directory: Path

    @property
    def alive(self) -> bool:
        return self.process.poll() is None


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        port: int = s.getsockname()[1]
        return port


def spark_home() -> Path:
    """The installed PySpark, which holds Spark's jars and ``bin/spark-class``."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


class StandaloneCluster:
    """A master on ``HOST`` and the workers added to it, all under ``root``.

    ``env`` is the environment the processes start from (this process's by default), less
    ``PYTHONPATH``. The master's ``port`` and ``ui_port`` are free ones unless given. Use as a
    context manager, or call ``start`` and ``stop``.
    """

    def __init__(
        self,
        root: Path,
        env: Mapping[str, str] | None = None,
        port: int | None = None,
        ui_port: int | None = None,
    ) -> None:
        self.root = root.resolve()  # workers run in directories of their own
        base = dict(os.environ if env is None else env)
        base.pop("PYTHONPATH", None)
        self.env = {
            **base,
            "SPARK_HOME": str(spark_home()),
            "SPARK_LOCAL_IP": HOST,
            "SPARK_DAEMON_MEMORY": DAEMON_MEMORY,
        }
        self.state = State.NEW
        self.port = port or free_port()
        self.ui_port = ui_port or free_port()
        self.master: subprocess.Popen[bytes] | None = None
        self.workers: list[Worker] = []

    @property
    def master_url(self) -> str:
        return f"spark://{HOST}:{self.port}"

    @property
    def ui_url(self) -> str:
        return f"http://{HOST}:{self.ui_port}"

    def __enter__(self) -> StandaloneCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self, timeout: float = 60.0) -> None:
        """Start the master and wait until its status page answers."""
        if self.state is not State.NEW:
            raise ClusterError(f"cannot start a cluster that is {self.state.value}")
        self.root.mkdir(parents=True, exist_ok=True)
        self.master = self._spawn(
            "master",
            ["org.apache.spark.deploy.master.Master", "--host", HOST, "--port", str(self.port),
             "--webui-port", str(self.ui_port)],
            self.root,
        )  # fmt: skip
        self.state = State.RUNNING
        deadline = time.monotonic() + timeout
        while True:
            with contextlib.suppress(OSError, ValueError):
                if self.status().get("status") == "ALIVE":
                    return
            if self.master.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise ClusterError(f"the Spark master did not start: {self.tail('master')}")
            time.sleep(0.2)

    def add_worker(self, cores: int = 1, memory: str = "1g") -> Worker:
        """Start one more worker, offering ``cores`` and ``memory`` to executors; it has
        registered once ``wait_for_workers`` counts it."""
        self._require_running()
        name = f"worker-{len(self.workers) + 1}"
        directory = self.root / name
        (directory / "local").mkdir(parents=True, exist_ok=True)
        port = free_port()
        process = self._spawn(
            name,
            ["org.apache.spark.deploy.worker.Worker", "--host", HOST, "--port", str(port),
             "--webui-port", str(free_port()), "--cores", str(cores), "--memory", memory,
             "--work-dir", str(directory / "work"), self.master_url],
            directory,
            # Executors' scratch files (shuffle, state stores' working copies) in the
            # worker's directory, not /tmp: a killed executor leaves them behind.
            SPARK_LOCAL_DIRS=str(directory / "local"),
        )  # fmt: skip
        worker = Worker(name, process, port, cores, memory, directory)
        self.workers.append(worker)
        return worker

    def wait_for_workers(self, count: int, timeout: float = 60.0) -> list[dict[str, Any]]:
        """Until the master counts ``count`` alive workers; returns their entries."""
        self._require_running()
        deadline = time.monotonic() + timeout
        while True:
            with contextlib.suppress(OSError, ValueError):
                alive = self.alive_workers()
                if len(alive) >= count:
                    return alive
            if time.monotonic() > deadline:
                raise ClusterError(
                    f"{count} workers did not register with the master in {timeout:.0f} s: "
                    + "; ".join(self.tail(w.name, 5) for w in self.workers)
                )
            time.sleep(0.2)

    def alive_workers(self) -> list[dict[str, Any]]:
        return [w for w in self.status().get("workers", []) if w.get("state") == "ALIVE"]

    def status(self) -> dict[str, Any]:
        """The master's status as its web UI serves it in JSON (``/json/``)."""
        with urllib.request.urlopen(f"{self.ui_url}/json/", timeout=2) as answer:
            found: dict[str, Any] = json.loads(answer.read())
            return found

    def kill_worker(self, worker: Worker) -> None:
        """SIGKILL a worker, as a machine that fails does; its executors notice and exit."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(worker.process.pid, signal.SIGKILL)
        worker.process.wait()

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> None:
        """Stop the workers, then the master: SIGTERM, and SIGKILL whatever outlives it by
        ``timeout`` seconds."""
        if self.state is not State.RUNNING:
            self.state = State.STOPPED
            return
        self.state = State.STOPPED
        processes = [w.process for w in self.workers]
        if self.master is not None:
            processes.append(self.master)
        for process in processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for process in processes:
            try:
                process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        # Each process leads a group of its own: what its executors started (Python workers)
        # and any executor that outlived a killed worker go with it.
        for process in processes:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)

    def tail(self, name: str, lines: int = 20) -> str:
        """The end of a process's log (``master``, ``worker-1``, ...)."""
        path = self.root / f"{name}.log"
        try:
            text = path.read_text(errors="replace").splitlines()
        except OSError:
            return f"{name}: no log"
        return f"{name}: " + "\n".join(text[-lines:])

    def _spawn(self, name: str, args: list[str], cwd: Path, **env: str) -> subprocess.Popen[bytes]:
        # spark-class execs the JVM, so the process is the master or worker itself: a signal
        # to its pid reaches the JVM.
        with open(self.root / f"{name}.log", "ab") as out:
            return subprocess.Popen(
                [str(spark_home() / "bin" / "spark-class"), *args],
                cwd=cwd, env={**self.env, **env}, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip

    def _require_running(self) -> None:
        if self.state is not State.RUNNING:
            raise ClusterError(f"the cluster is {self.state.value}; start it first")
