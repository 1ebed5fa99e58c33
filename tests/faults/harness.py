"""The fault suite's parts: knobs, the pipeline and the gateway as processes, steady writers.

Every process is started by this test process, in its own temporary directory, on free ports,
and is stopped by pid; a SIGKILL goes to the one process a fault is about (the Spark driver JVM,
the gateway, the store), never to anything found by name.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import redis

from demo.chirp import app as chirp
from demo.chirp.generate import Activity
from liveviews.changes.topic import FRONTIER_BATCHES_KEY, batches_key
from liveviews.log.eventlog import EventLog, views_caught_up
from liveviews.log.events import MAX_EVENT_TIME_MS, log_stream, partition_for
from tests.support.processes import spark_jvm

ROOT = Path(__file__).resolve().parents[2]
PARTITIONS = 4
SHARDS = 8
RETENTION = 10_000_000
"""The change topic keeps every delta, so the checks can replay all of them."""


@dataclass(frozen=True)
class Knobs:
    """``LV_FAULT_KILLS``, ``LV_FAULT_SECONDS``, ``LV_FAULT_SEED``: CI-size by default."""

    kills: int
    seconds: float
    seed: int

    @classmethod
    def from_env(cls, kills: int = 3, seconds: float = 0.0) -> Knobs:
        env = os.environ
        return cls(
            kills=int(env.get("LV_FAULT_KILLS") or kills),
            seconds=float(env.get("LV_FAULT_SECONDS") or seconds),
            seed=int(env.get("LV_FAULT_SEED") or 1),
        )

    def rng(self) -> random.Random:
        return random.Random(self.seed)


def store_env(store_url: str) -> dict[str, str]:
    return {
        "REDIS_URL": store_url,
        "LV_LOG_PARTITIONS": str(PARTITIONS),
        "LV_CHANGE_SHARDS": str(SHARDS),
        "LV_CHANGE_RETENTION": str(RETENTION),
        "PYSPARK_PYTHON": sys.executable,
    }


class Pipeline:
    """``python -m liveviews.pipeline`` as a child process, restartable over the same checkpoint."""

    def __init__(
        self, store_url: str, workdir: Path, supervised: bool = False, prefix: Sequence[str] = ()
    ) -> None:
        self.store_url = store_url
        self.workdir = workdir
        self.supervised = supervised
        """Run under ``liveviews.supervise``, as ``make run`` and ``liveviews dev`` do."""
        self.prefix = list(prefix)
        """A command the process runs under (``ip netns exec <name>``); it keeps its pid."""
        self.env = {
            **os.environ,
            **store_env(store_url),
            "LV_DATA_DIR": str(workdir / "data"),
            "LV_CHECKPOINT_DIR": str(workdir / "checkpoints"),
            "LV_SHUFFLE_PARTITIONS": "2",
            "LV_DRIVER_MEMORY": "1g",
            "LV_MAX_EVENTS_PER_BATCH": "5000",
        }
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> None:
        assert self.process is None or self.process.poll() is not None
        out = open(self.workdir / "pipeline.log", "ab")  # noqa: SIM115 - the child owns it
        command = [sys.executable, "-m", "liveviews.pipeline"]
        if self.supervised:
            command = [sys.executable, "-m", "liveviews.supervise", "pipeline", "--", *command]
        self.process = subprocess.Popen(
            [*self.prefix, *command], cwd=ROOT, env=self.env, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
        out.close()
        self.starts += 1

    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def jvm(self) -> int:
        return spark_jvm(self.pid())

    def kill_jvm(self, timeout: float = 30) -> bool:
        """SIGKILL the driver JVM: the launcher then exits, as after a real crash.

        Returns False if the launcher outlived its JVM by ``timeout`` s: its Python stacks are
        then written to ``launcher-hang-<n>.txt`` (py-spy) and it is killed as well.
        """
        assert self.process is not None
        os.kill(self.jvm(), signal.SIGKILL)
        try:
            self.process.wait(timeout)
            return True
        except subprocess.TimeoutExpired:
            stacks = subprocess.run(
                [str(Path(sys.executable).parent / "py-spy"), "dump", "--pid",
                 str(self.process.pid)],
                capture_output=True, text=True, timeout=30,
            )  # fmt: skip
            report = stacks.stdout + stacks.stderr + "\n" + self.tail(80)
            (self.workdir / f"launcher-hang-{self.starts}.txt").write_text(report)
            (ROOT / "test-artifacts").mkdir(exist_ok=True)  # kept after the tmp dir goes
            (ROOT / "test-artifacts" / f"launcher-hang-{self.starts}.txt").write_text(report)
            self.process.kill()
            self.process.wait()
            return False

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self) -> None:
        proc = self.process
        if proc is None or proc.poll() is not None:
            return
        jvm = None
        with contextlib.suppress(AssertionError):
            jvm = spark_jvm(proc.pid, timeout=1)
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            if jvm is not None:
                _kill_quietly(jvm)
            proc.kill()
            proc.wait()
        if jvm is not None:
            _kill_quietly(jvm)

    def supervised_starts(self) -> int:
        """How many times the supervisor started the pipeline, from its log."""
        text = (self.workdir / "pipeline.log").read_text(errors="replace")
        return 1 + text.count("starting it again")

    def tail(self, lines: int = 40) -> str:
        path = self.workdir / "pipeline.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def _kill_quietly(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


class Gateway:
    """``python -m liveviews.gateway`` as a child process on a fixed port, restartable on that port."""

    def __init__(
        self, store_url: str, workdir: Path, port: int, host: str = "127.0.0.1",
        prefix: Sequence[str] = (), **env: str,
    ) -> None:  # fmt: skip
        self.port = port
        self.url = f"http://{host}:{port}"
        self.prefix = list(prefix)
        """A command the process runs under (``ip netns exec <name>``); it keeps its pid."""
        self.workdir = workdir
        self.env = {
            **os.environ,
            **store_env(store_url),
            "LV_DATA_DIR": str(workdir / "gateway-data"),
            "LV_HOST": host,
            "LV_PORT": str(port),
            "LV_FEED_BLOCK_MS": "100",
            "LV_HEARTBEAT_SECONDS": "1",
            **env,
        }
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 30) -> None:
        out = open(self.workdir / "gateway.log", "ab")  # noqa: SIM115 - the child owns it
        self.process = subprocess.Popen(
            [*self.prefix, sys.executable, "-m", "liveviews.gateway"], cwd=ROOT, env=self.env,
            stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
        out.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.process.poll() is None, f"the gateway exited: {self.tail()}"
            try:
                with urllib.request.urlopen(self.url + "/healthz", timeout=1) as r:
                    if r.status == 200:
                        return
            except (OSError, urllib.error.URLError):
                pass
            time.sleep(0.05)
        raise AssertionError(f"the gateway did not start: {self.tail()}")

    def signal(self, sig: signal.Signals, timeout: float = 30) -> float:
        """Send ``sig`` and wait for the process to exit; returns how long that took."""
        assert self.process is not None
        t0 = time.monotonic()
        self.process.send_signal(sig)
        self.process.wait(timeout)
        return time.monotonic() - t0

    def stop(self) -> None:
        proc = self.process
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def tail(self, lines: int = 40) -> str:
        path = self.workdir / "gateway.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


class LogWriter(threading.Thread):
    """Appends Chirp activity to the log in small batches until stopped; counts what it wrote.

    Store errors (while the store restarts) are retried: a batch is one MULTI/EXEC, so it
    landed whole or not at all, and it is counted only once the store acknowledged it.
    """

    def __init__(
        self, client: redis.Redis, seed: int, batch: int = 20, pause: float = 0.1,
        bad_every: int = 0,
    ):  # fmt: skip
        super().__init__(daemon=True)
        self.client = client
        self.log = EventLog(client, chirp, PARTITIONS)
        self.activity = Activity(users=30, seed=seed)
        self.batch, self.pause = batch, pause
        self.bad_every = bad_every
        """After every this many batches, three bad entries written straight into the log."""
        self.undecodable: list[str] = []
        """Offsets of entries no pipeline can decode (a payload that is not an object, a time
        missing)."""
        self.untimed: list[str] = []
        """Offsets of the entries without a time: the ones of ``undecodable`` that the
        Real-Time Mode source, which does not check payloads, sets aside too."""
        self.from_the_future: list[str] = []
        """Offsets of tweets dated in year 9999 (past the gateway's check of event times): the
        entities view shows them; the activity view leaves out an event dated after its
        arrival, which would move Spark's watermark past every window."""
        self.halt = threading.Event()
        self.written = 0
        self.failures = 0

    def run(self) -> None:
        pending: list[Any] = []
        batches = 0
        while not self.halt.is_set():
            pending = pending or self.activity.take(self.batch)
            try:
                self.log.append_batch(pending)
                batches += 1
                if self.bad_every and batches % self.bad_every == 0:
                    self._write_bad(batches)
            except redis.ConnectionError:
                self.failures += 1
                time.sleep(0.1)
                continue
            self.written += len(pending)
            pending = []
            time.sleep(self.pause)

    def _write_bad(self, n: int) -> None:
        user = "zed"
        stream = log_stream(partition_for(user, PARTITIONS))
        tweet = {"user": user, "tweet": f"{user}:far{n}", "text": "from the future"}
        fields = {"type": "tweet_posted", "key": user, "payload": orjson.dumps(tweet)}
        broken = self.client.xadd(stream, {**fields, "time": 1, "payload": b"[]"})  # type: ignore[dict-item]
        self.undecodable.append(f"{partition_for(user, PARTITIONS)}:{broken.decode()}")  # type: ignore[union-attr]
        untimed = self.client.xadd(stream, fields)  # type: ignore[arg-type]
        self.untimed.append(f"{partition_for(user, PARTITIONS)}:{untimed.decode()}")  # type: ignore[union-attr]
        self.undecodable.append(self.untimed[-1])
        far = self.client.xadd(stream, {**fields, "time": MAX_EVENT_TIME_MS - n})  # type: ignore[dict-item]
        self.from_the_future.append(f"{partition_for(user, PARTITIONS)}:{far.decode()}")  # type: ignore[union-attr]

    def stop(self) -> int:
        self.halt.set()
        self.join(30)
        return self.written


def wait_caught_up(
    client: redis.Redis, pipeline: Pipeline | None = None, timeout: float = 180
) -> float:
    """Until the views' frontier equals the log's heads; returns the seconds it took."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if pipeline is not None and not pipeline.alive():
            raise AssertionError(f"the pipeline exited:\n{pipeline.tail()}")
        if views_caught_up(client, PARTITIONS):
            return time.monotonic() - t0
        time.sleep(0.1)
    tail = pipeline.tail() if pipeline is not None else ""
    raise AssertionError(f"the views did not catch up with the log in {timeout} s\n{tail}")


def wait_until(what: str, predicate: Callable[[], bool], timeout: float = 60) -> None:
    """Until ``predicate()`` holds; fails saying ``what`` did not happen within ``timeout``."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"{what} within {timeout:.0f} s"
        time.sleep(0.1)


def wait_for_progress(client: redis.Redis, after: int, pipeline: Pipeline, timeout: float = 120):
    """Until ``lv:{m}:progress`` has grown past ``after`` entries: this run has written a batch."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not pipeline.alive():
            raise AssertionError(f"the pipeline exited:\n{pipeline.tail()}")
        if client.xlen("lv:{m}:progress") > after:
            return
        time.sleep(0.05)
    raise AssertionError(f"the pipeline wrote no batch in {timeout} s\n{pipeline.tail()}")


def batch_spread(client: redis.Redis) -> bool:
    """Did some shard take a batch whose frontier advance never came (killed mid-sink)?"""
    recorded: Any = client.hgetall(FRONTIER_BATCHES_KEY)
    for name, raw in recorded.items():
        done = int(raw)
        for shard in range(SHARDS):
            got = client.hget(batches_key(shard), name)
            if got is not None and int(got) > done:
                return True
    return False


@dataclass
class Figures:
    """What a fault test counts, printed at its end (``pytest -s`` shows it)."""

    name: str
    values: dict[str, Any] = field(default_factory=dict)

    def print(self) -> None:
        line = orjson.dumps({"fault_test": self.name, **self.values}).decode()
        print(f"\nFAULT FIGURES {line}", flush=True)
        out = os.environ.get("LV_FAULT_REPORT")
        if out:
            with open(out, "a") as f:
                f.write(line + "\n")
