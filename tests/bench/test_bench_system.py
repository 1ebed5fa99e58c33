"""The latency benchmark's view of the pipeline's driver JVM, and how it names its phases; the
benchmarks' system with its log on Kafka."""

from __future__ import annotations

import contextlib
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import psutil
import pytest
import redis

from bench.latencyreport import phase_title
from bench.system import COMPILER_THREADS, System, jvm_cpu
from liveviews.changes.topic import FRONTIER_KEY, VIEWS_FRONTIER

SPIN = """
public class Spin {
    public static void main(String[] args) {
        long end = System.nanoTime() + 20_000_000_000L;
        long x = 0;
        while (System.nanoTime() < end) { x += Long.toString(x).hashCode(); }
        System.out.println(x);
    }
}
"""


@contextlib.contextmanager
def spinning_jvm(folder: Path) -> Iterator[int]:
    """A JVM's pid, a second after it started: the source launcher compiles Spin.java in the
    JVM, then Spin keeps a core busy, and both keep the JIT compilers at work."""
    source = folder / "Spin.java"
    source.write_text(SPIN)
    jvm = subprocess.Popen(["java", str(source)], stdout=subprocess.DEVNULL)
    try:
        time.sleep(1.0)
        yield jvm.pid
    finally:
        jvm.kill()
        jvm.wait()


def test_jvm_cpu_counts_the_whole_jvm_and_its_jit_compilers(tmp_path: Path) -> None:
    with spinning_jvm(tmp_path) as pid:
        before = jvm_cpu(pid)
        time.sleep(2.0)
        after = jvm_cpu(pid)
    assert after["cpu_s"] - before["cpu_s"] > 1.0  # at least half a core for 2 s
    assert after["jit_cpu_s"] > 0
    assert after["jit_cpu_s"] < after["cpu_s"]
    assert before["cpu_s"] > before["jit_cpu_s"]


def test_a_compiler_thread_that_ended_keeps_its_cpu_in_the_figure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """HotSpot ends an idle compiler thread; the JVM is real, and its thread list is cut at the
    second reading to stand for that ending."""
    listed = psutil.Process.threads

    def without_compilers(process: psutil.Process) -> list[Any]:
        return [t for t in listed(process) if not _compiler(process.pid, t.id)]

    with spinning_jvm(tmp_path) as pid:
        before = jvm_cpu(pid)
        monkeypatch.setattr(psutil.Process, "threads", without_compilers)
        after = jvm_cpu(pid)
    assert before["jit_cpu_s"] > 0
    assert after["jit_cpu_s"] >= before["jit_cpu_s"]


def _compiler(pid: int, tid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/task/{tid}/comm").read_text().startswith(COMPILER_THREADS)
    except OSError:
        return False


def test_a_rate_that_ran_before_is_titled_again() -> None:
    rates = [10, 100, 1000, 100]
    titles = [phase_title(rates, i) for i in range(len(rates))]
    assert titles == ["10 events/s", "100 events/s", "1000 events/s", "100 events/s, again"]


def test_a_system_on_kafka_writes_counts_and_follows_its_topic(
    store_url: str, store: redis.Redis, kafka_bootstrap: str, tmp_path: Path
) -> None:
    """What ``bench.rebuild --log kafka`` rests on: the writer appends to the system's topic,
    its positions count the events and each transaction's commit marker, and the views are
    caught up once nothing but commit markers lies past the frontier."""
    system = System(store_url, store, tmp_path, kafka=kafka_bootstrap,
                    topic=f"log-{uuid.uuid4().hex[:8]}")  # fmt: skip
    assert system.env()["LV_KAFKA_TOPIC"] == system.topic
    writer = system.writer()
    try:
        offsets = writer.append_batch([
            {"type": "profile_set", "payload": {"user": f"u{i}", "name": "n"}} for i in range(6)
        ])  # fmt: skip
    finally:
        writer.close()
    partitions = {o.partition for o in offsets}
    assert system.log_positions() == len(offsets) + len(partitions)
    ends: dict[int, int] = {}
    for o in offsets:  # past each partition's last record, and the marker after it
        ends[o.partition] = max(ends.get(o.partition, 0), int(o.id) + 1)

    def frontier_at(behind: int) -> None:
        at = {p: str(e - behind) for p, e in ends.items()}
        store.hset(FRONTIER_KEY, VIEWS_FRONTIER, orjson.dumps(at, option=orjson.OPT_NON_STR_KEYS))

    try:
        frontier_at(2)  # before each partition's last record
        assert not system.caught_up()
        frontier_at(1)  # past it, before its marker: where Real-Time Mode stops
        assert system.caught_up()
        frontier_at(0)
        assert system.caught_up()
    finally:
        store.hdel(FRONTIER_KEY, VIEWS_FRONTIER)
