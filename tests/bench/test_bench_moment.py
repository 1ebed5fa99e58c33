"""The machine's moment each benchmark records beside its figures (``bench.moment``)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from bench import moment
from bench.common import save

STAT = """cpu  5496783 10509 748071 4970845 61660 0 102477 238980 0 0
cpu0 2568423 4888 343025 2728315 10539 0 43208 120576 0 0
intr 1 2 3
"""


def test_cpu_times_are_read_from_the_machine_wide_line() -> None:
    times = moment.CpuTimes.parse(STAT)
    assert times == moment.CpuTimes(
        busy=5496783 + 10509 + 748071 + 0 + 102477, idle=4970845, iowait=61660, steal=238980
    )


def test_shares_are_percent_of_all_cpu_time_in_the_window() -> None:
    start = moment.CpuTimes(busy=100, idle=100, iowait=0, steal=0)
    later = moment.CpuTimes(busy=160, idle=130, iowait=0, steal=10)
    assert later.shares_since(start) == {
        "busy_pct": 60.0,
        "idle_pct": 30.0,
        "iowait_pct": 0.0,
        "steal_pct": 10.0,
    }
    assert start.shares_since(start)["busy_pct"] == 0.0  # an empty window divides nothing


def test_a_stat_without_a_cpu_line_is_refused() -> None:
    with pytest.raises(ValueError):
        moment.CpuTimes.parse("intr 1 2 3\n")


def test_probes_time_real_work() -> None:
    assert moment.python_loop_ms(500_000) > moment.python_loop_ms(20_000) > 0
    # two system calls and a wake-up each way: never under a microsecond, even rounded
    assert moment.round_trip_us(200) > 1


def test_a_moment_is_finished_once_and_saved_with_the_figures(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(moment, "LOOP_ITERATIONS", 50_000)
    monkeypatch.setattr(moment, "ROUND_TRIPS", 200)
    monkeypatch.setenv("LV_BENCH_RESULTS", str(tmp_path))
    started = moment.Moment()
    time.sleep(0.3)  # a few of /proc/stat's ticks (100 per second per core) in the window
    finished = started.finish()
    assert started.finish() is finished
    assert set(finished) == {"seconds", "probe_before", "probe_after", "cpu"}
    assert finished["probe_after"]["round_trip_us"] > 0
    assert sum(finished["cpu"].values()) == pytest.approx(100, abs=0.5)

    path = save("example", {"answer": 42}, started)
    written = json.loads(path.read_text())
    assert written["moment"] == finished
    assert written["figures"] == {"answer": 42}
    sentence = moment.describe(finished)
    assert f"{finished['probe_before']['python_loop_ms']} ms before" in sentence
    assert f"{finished['cpu']['steal_pct']}% taken by the host" in sentence
