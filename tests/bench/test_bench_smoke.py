"""The benchmark harness still works: every benchmark runs at a tiny size and reports, and what
a benchmark starts ends with it, however the benchmark ends.

The figures of such a run mean nothing; ``python -m bench`` without ``--quick`` measures. Each
benchmark runs as a test of its own, so that a slow moment of the machine spreads over several
tests' limits and a benchmark that hangs is named.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from bench.__main__ import BENCHMARKS
from bench.processes import stop_tree

ROOT = Path(__file__).resolve().parents[2]
HARNESS_TIMEOUT_S = 560
"""Below pytest's limit of 600 s, so that the test, not pytest, stops the harness and its tree."""


def started_by(marker: Path) -> list[psutil.Process]:
    """Every process running with ``LV_BENCH_RESULTS=marker``: all that a harness started
    with that setting, wherever its parent is now."""
    found = []
    for p in psutil.process_iter():
        try:
            if p.environ().get("LV_BENCH_RESULTS") == str(marker) and p.status() != "zombie":
                found.append(p)
        except psutil.Error:
            continue
    return found


def no_process_left(marker: Path, within: float = 40) -> None:
    deadline = time.monotonic() + within
    while (left := started_by(marker)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not left, [" ".join(p.cmdline()[:4]) for p in left if p.is_running()]


def harness_env(tmp_path: Path) -> dict[str, str]:
    """Results to ``tmp_path``, which also marks every process the harness starts; its own
    embedded store, never the suite's."""
    env = {**os.environ, "LV_BENCH_RESULTS": str(tmp_path)}
    env.pop("REDIS_URL", None)
    return env


def harness(tmp_path: Path, *args: str) -> subprocess.Popen[str]:
    env = harness_env(tmp_path)
    return subprocess.Popen([sys.executable, "-m", "bench", "--quick", *args], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip


def run_harness(tmp_path: Path, *args: str) -> tuple[int, str]:
    proc = harness(tmp_path, *args)
    try:
        out, _ = proc.communicate(timeout=HARNESS_TIMEOUT_S)
    finally:
        stop_tree(proc)
    no_process_left(tmp_path)
    return proc.returncode, out


@pytest.mark.parametrize("name", BENCHMARKS)
def test_quick_run_of_each_benchmark(tmp_path: Path, name: str) -> None:
    code, out = run_harness(tmp_path, "--only", name)
    assert code == 0, out[-6000:]
    summary = (tmp_path / "SUMMARY.md").read_text()
    result = json.loads((tmp_path / f"{name}.json").read_text())
    assert result["figures"], name
    assert result["machine"]["cores"] >= 1
    assert result["moment"]["probe_before"]["round_trip_us"] > 0
    assert "| figure | measured | target | same-run baseline |" in summary
    assert "failed" not in summary
    assert summary.count("The machine during this benchmark") == 1
    for plot in re.findall(r"!\[[^]]*\]\(([^)]+)\)", summary):
        assert (tmp_path / plot).is_file(), plot
    if name == "latency":
        phase = result["figures"]["tuned"][0]
        assert phase["after_pipeline_start_s"] > 0
        assert phase["driver_jvm_cpu_s"] > phase["driver_jit_cpu_s"] > 0  # the pipeline's JVM
    if name == "pipeline":
        from bench.pipeline import COLD_VARIANTS

        cold = result["figures"]["cold_start"]
        assert cold.keys() == COLD_VARIANTS.keys() and all(v["median_s"] > 0 for v in cold.values())


def test_a_benchmark_past_its_budget_is_stopped_with_what_it_started(tmp_path: Path) -> None:
    """The latency benchmark starts a store, a pipeline (its JVM and Python workers) and a
    gateway; 20 s is not enough for it, and none of them outlives the stop."""
    code, out = run_harness(tmp_path, "--only", "latency,store", "--budget", "20")
    assert code == 1, out[-3000:]
    summary = (tmp_path / "SUMMARY.md").read_text()
    assert "## latency: failed" in summary and "ran past its budget of 20 s" in summary
    # The benchmark after it ran as usual.
    assert "## The store's CPU" in summary
    assert json.loads((tmp_path / "store.json").read_text())["figures"]


def test_a_killed_harness_leaves_nothing_running(tmp_path: Path) -> None:
    """SIGKILL, as a test runner's timeout or an out-of-memory killer ends it: the benchmark
    it ran learns of it and stops the store, gateway and pipeline (its driver JVM and the
    JVM's Python processes) it started."""
    proc = harness(tmp_path, "--only", "latency")
    try:
        deadline = time.monotonic() + 120
        while not any(p.name() == "java" for p in started_by(tmp_path)):  # the driver's JVM
            assert time.monotonic() < deadline and proc.poll() is None, "no pipeline started"
            time.sleep(0.5)
        tree = psutil.Process(proc.pid).children(recursive=True)
        assert any(p.name().startswith(("valkey", "redis")) for p in tree)  # the store too
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        no_process_left(tmp_path, within=60)
        # The store rewrites its command line and environment, so it is checked by its pid.
        _, alive = psutil.wait_procs(tree, timeout=10)
        assert not alive, [p.name() for p in alive]
    finally:
        stop_tree(proc)
        for p in started_by(tmp_path):  # what the assertion above found, not to load what follows
            p.kill()


def test_a_harness_left_in_the_background_runs_to_its_end(tmp_path: Path) -> None:
    """``nohup python -m bench &`` from a shell that then exits: the harness is not stopped
    with the shell, only the benchmarks it runs are with it."""
    # The shell outlives the harness's start by a few seconds, as a person's would.
    command = f"nohup {sys.executable} -m bench --quick --only store,publish,deadletters >/dev/null 2>&1 & sleep 2"
    subprocess.run(["bash", "-c", command], cwd=ROOT, env=harness_env(tmp_path), check=True,
                   timeout=30)  # fmt: skip
    no_process_left(tmp_path, within=90)  # the harness has ended, one way or the other
    summary = tmp_path / "SUMMARY.md"
    assert summary.exists(), "the harness stopped with the shell that started it"
    assert "failed" not in summary.read_text()
