"""The latency benchmark's view of the pipeline's driver JVM, and how it names its phases."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from bench.latency import phase_title
from bench.system import jvm_cpu

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


def test_jvm_cpu_counts_the_whole_jvm_and_its_jit_compilers(tmp_path: Path) -> None:
    source = tmp_path / "Spin.java"
    source.write_text(SPIN)
    # The source launcher compiles Spin.java in the JVM, then Spin keeps a core busy: both
    # keep the JIT compilers at work.
    jvm = subprocess.Popen(["java", str(source)], stdout=subprocess.DEVNULL)
    try:
        time.sleep(1.0)
        before = jvm_cpu(jvm.pid)
        time.sleep(2.0)
        after = jvm_cpu(jvm.pid)
    finally:
        jvm.kill()
        jvm.wait()
    assert after["cpu_s"] - before["cpu_s"] > 1.0  # at least half a core for 2 s
    assert after["jit_cpu_s"] > 0
    assert after["jit_cpu_s"] < after["cpu_s"]
    assert before["cpu_s"] > before["jit_cpu_s"]


def test_a_rate_that_ran_before_is_titled_again() -> None:
    rates = [10, 100, 1000, 100]
    titles = [phase_title(rates, i) for i in range(len(rates))]
    assert titles == ["10 events/s", "100 events/s", "1000 events/s", "100 events/s, again"]
