"""A full run's headline times against the last recorded run's (``bench.regression``)."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

from bench import regression
from bench.__main__ import summary
from bench.common import RESULTS, Report, machine


def result(p50_ms: float, loop_ms: float = 50.0, trip_us: float = 60.0) -> dict[str, Any]:
    """A latency result file as ``bench.common.save`` writes it, with one rate and two probes."""
    probes = {"python_loop_ms": loop_ms, "round_trip_us": trip_us}
    return {
        "benchmark": "latency",
        "machine": {"when": "2026-11-23T19:23:22Z", "commit": "e1a683d"},
        "moment": {"probe_before": probes, "probe_after": probes, "seconds": 60.0},
        "figures": {
            "tuned": [{"rate": 100, "push": {"p50_ms": p50_ms, "p99_ms": 2 * p50_ms}}],
            "cold_start_s": 8.0,  # not a headline: never compared
        },
    }


def row(lines: list[str], figure: str) -> list[str]:
    """The cells of the table row of ``figure``."""
    (found,) = [line for line in lines if line.startswith(f"| {figure} |")]
    return [cell.strip() for cell in found.strip("|").split("|")]


def test_a_time_that_doubled_on_an_unchanged_machine_moved() -> None:
    lines = regression.against_last_run({"latency": result(150.0)}, {"latency": result(300.0)})
    assert row(lines, "tuned[0:100].push.p50_ms") == [
        "tuned[0:100].push.p50_ms", "150", "300", "2.00x", "loop 1.00x, round trip 1.00x",
        "**moved: worse**",
    ]  # fmt: skip
    assert row(lines, "tuned[0:100].push.p99_ms")[-1] == "within noise"  # a tail's wider band
    assert "1 of 2 headline times moved: tuned[0:100].push.p50_ms (worse)." in "\n".join(lines)
    assert not any("cold_start" in line for line in lines)


def test_a_time_that_doubled_with_the_machine_is_within_noise() -> None:
    slower = result(300.0, loop_ms=50.0, trip_us=120.0)  # only the round trip doubled
    lines = regression.against_last_run({"latency": result(150.0)}, {"latency": slower})
    assert row(lines, "tuned[0:100].push.p50_ms")[-2:] == [
        "loop 1.00x, round trip 2.00x",
        "within noise",
    ]


def test_a_faster_machine_does_not_accuse_a_time_that_held() -> None:
    # polling once a second does not scale with the machine: the span starts at no change
    faster = result(150.0, loop_ms=25.0, trip_us=30.0)
    lines = regression.against_last_run({"latency": result(150.0)}, {"latency": faster})
    assert row(lines, "tuned[0:100].push.p50_ms")[-1] == "within noise"
    halved = result(60.0)
    lines = regression.against_last_run({"latency": result(150.0)}, {"latency": halved})
    assert row(lines, "tuned[0:100].push.p50_ms")[-1] == "**moved: better**"


def test_no_previous_file_means_no_section(tmp_path: Path) -> None:
    assert regression.read_recorded(tmp_path / "latency.json") is None
    assert regression.against_last_run({}, {"latency": result(150.0)}) == []


def test_an_unreadable_previous_file_is_said_in_a_sentence(tmp_path: Path) -> None:
    (tmp_path / "latency.json").write_text("{not json")
    (tmp_path / "fanout.json").write_text('{"benchmark": "fanout"}')
    recorded: dict[str, dict[str, Any] | str] = {}
    for name in ("latency", "fanout"):
        said = regression.read_recorded(tmp_path / f"{name}.json")
        assert isinstance(said, str)
        recorded[name] = said
    this_run = {"latency": result(150.0), "fanout": {"figures": {}, "moment": {}}}
    text = "\n".join(regression.against_last_run(recorded, this_run))
    assert "The last recorded latency.json could not be read" in text
    assert "The last recorded fanout.json holds no figures" in text


def test_an_old_file_without_a_commit_compares_with_its_date_only() -> None:
    old = result(150.0)
    del old["machine"]["commit"]
    this = result(150.0)
    this["machine"] |= {"commit": "abc1234", "uncommitted_changes": True}
    lines = regression.against_last_run({"latency": old}, {"latency": this})
    assert (
        "Last recorded run: 2026-11-23T19:23:22Z; this run: 2026-11-23T19:23:22Z, commit "
        "abc1234 with uncommitted changes. 0 of 2 headline times moved." in lines
    )
    assert row(lines, "tuned[0:100].push.p50_ms")[-1] == "within noise"


def test_a_run_without_probes_cannot_be_judged() -> None:
    old = result(150.0)
    del old["moment"]
    lines = regression.against_last_run({"latency": old}, {"latency": result(300.0)})
    assert row(lines, "tuned[0:100].push.p50_ms")[-2:] == [
        "no probes",
        "cannot tell: a run without probes",
    ]


def test_the_machine_records_the_commit_it_measured() -> None:
    recorded = machine()
    assert re.fullmatch(r"[0-9a-f]{4,40}", recorded["commit"])
    assert isinstance(recorded["uncommitted_changes"], bool)


def test_the_summary_compares_the_recorded_latency_run() -> None:
    """The path of a full ``python -m bench``: the committed result file is read before the
    run, and the summary sets this run's report (here a modified copy) against it."""
    recorded = regression.read_recorded(RESULTS / "latency.json")
    assert isinstance(recorded, dict)
    this_run = copy.deepcopy(recorded)
    rate = this_run["figures"]["tuned"][1]
    rate["push"]["p50_ms"] *= 2  # a regression on a machine as fast as before
    report = Report("latency", "End-to-end latency", "python -m bench.latency",
                    this_run["figures"], moment=this_run["moment"])  # fmt: skip

    text = summary([report], {}, quick=False, recorded={"latency": recorded})

    section = text.split("## Against the last recorded run", 1)[1].splitlines()
    assert row(section, f"tuned[1:{rate['rate']}].push.p50_ms")[-1] == "**moved: worse**"
    assert row(section, f"tuned[1:{rate['rate']}].polling.p50_ms")[-1] == "within noise"
    compared = len(regression.headline_times("latency", this_run["figures"]))
    assert f"1 of {compared} headline times moved: tuned[1:{rate['rate']}].push.p50_ms" in text
    assert f"this run: {machine()['when'][:10]}" in text  # with this checkout's commit
    assert f"commit {machine()['commit']}" in text
    # a quick run's figures mean nothing, and a run with nothing recorded has nothing to compare
    quick = summary([report], {}, quick=True, recorded={"latency": recorded})
    assert "Against the last recorded run" not in quick
    assert "Against the last recorded run" not in summary([report], {}, quick=False)
