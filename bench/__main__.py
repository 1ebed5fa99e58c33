"""The benchmark harness: every benchmark, then one summary.

    .venv/bin/python -m bench [--quick] [--only latency,fanout,...] [--budget SECONDS]

Each benchmark runs in a process of its own (``bench.single``) and writes
``bench/results/<name>.json`` (its figures, the machine and the versions) and its PNG plots;
this command then writes ``bench/results/SUMMARY.md`` with each target beside the measured
figure and the same-run baseline, and, after a full run, the headline times of ``COMPARED``
against the last recorded run's (``bench.regression``). ``--quick`` runs every benchmark
at a tiny size, only to show the harness works (the CI runs it); its figures mean nothing and
go to ``bench/results/quick/`` (or ``$LV_BENCH_RESULTS``).

A benchmark that runs past its time budget (``--budget``; ``QUICK_BUDGET_S`` for a quick run,
none otherwise) is stopped with everything it started and reported as failed, and the others
run on. Whatever ends the harness (Ctrl-C, SIGTERM, its parent's death), the stores, pipelines
and gateways its benchmarks started end with it (``bench.processes``).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import RESULTS, Report, machine, results_dir
from bench.moment import describe
from bench.processes import guard, stop_descendants, stop_tree
from bench.regression import COMPARED, against_last_run, read_recorded
from bench.single import error_path

BENCHMARKS = [
    "fanout", "filters", "gateways", "floor", "tokens", "clients", "memory", "store", "publish",
    "kafkaclients", "storecluster", "deadletters", "latency", "groups", "realtime", "browser",
    "cdc", "pipeline", "kafkalog", "scans", "rebuild",
]  # fmt: skip
"""In order: the gateway's own figures first, then the store's, then those with Spark in the
loop."""
QUICK_BUDGET_S = 420.0
"""A quick benchmark takes well under a minute on a quiet machine and a few at a slow moment of
the reference machine (2-3x slower); past this it is stopped, below the test suite's limit of
600 s per test, so that the suite reports which one hung instead of timing out."""


def run_one(name: str, quick: bool, budget: float | None) -> Report | str:
    """Run benchmark ``name`` in a process of its own: its report, or why it failed."""
    with tempfile.TemporaryDirectory(prefix="lv-bench-report-") as tmp:
        report = Path(tmp) / "report.json"
        command = [sys.executable, "-m", "bench.single", name, "--report", str(report)]
        child = subprocess.Popen(command + ["--quick"] * quick)
        try:
            code = child.wait(budget)
        except subprocess.TimeoutExpired:
            return (f"ran past its budget of {budget:.0f} s (--budget) and was stopped, with "
                    "everything it had started")  # fmt: skip
        finally:
            stop_tree(child)
            stop_descendants()  # what it started and left behind came to this process
        if error_path(report).exists():
            return error_path(report).read_text()
        if code != 0 or not report.exists():
            return f"exited with status {code} before writing its report; its output is above"
        return Report.loads(report.read_bytes())


def summary(
    reports: list[Report],
    failures: dict[str, str],
    quick: bool,
    recorded: dict[str, dict[str, Any] | str] | None = None,
) -> str:
    """The summary; ``recorded`` is the last recorded run's result file of each benchmark
    compared with it (``bench.regression``), read before this run overwrote it."""
    m = machine()
    lines = [
        "# Benchmark summary" + (" (quick run: sizes too small to mean anything)" if quick else ""),
        "",
        f"Machine: {m['cores']} cores, {m['memory_gib']} GiB, {m['platform']}; "
        f"Python {m['python']}; {m['java']}; "
        + ", ".join(f"{k} {v}" for k, v in sorted(m["versions"].items()))
        + f". Run at {m['when']}.",
        "",
    ]
    for report in reports:
        lines += [f"## {report.title}", "", f"Command: `.venv/bin/{report.command}`", ""]
        lines += ["| figure | measured | target | same-run baseline |", "|---|---|---|---|"]
        for row in report.rows:
            lines.append(f"| {row.figure} | {row.measured} | {row.target} | {row.baseline} |")
        lines.append("")
        for note in report.notes:
            lines += [note, ""]
        if report.moment:
            lines += [describe(report.moment), ""]
        for plot in report.plots:
            lines += [f"![{plot.stem}]({plot.name})", ""]
    for name, error in failures.items():
        lines += [f"## {name}: failed", "", "```", error.strip()[-2000:], "```", ""]
    if not quick:  # a quick run's figures mean nothing against a full one's
        this_run = {
            r.name: {"figures": r.figures, "moment": r.moment, "machine": m} for r in reports
        }
        lines += against_last_run(recorded or {}, this_run)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes: check the harness")
    parser.add_argument("--only", default="", help="comma-separated: " + ",".join(BENCHMARKS))
    parser.add_argument("--budget", type=float, default=None, metavar="SECONDS",
                        help=f"time for each benchmark (default: {QUICK_BUDGET_S:.0f} with"
                        " --quick, none otherwise)")  # fmt: skip
    args = parser.parse_args(argv)
    budget = args.budget if args.budget is not None else QUICK_BUDGET_S if args.quick else None
    names = [n for n in args.only.split(",") if n] or BENCHMARKS
    if args.quick:  # never over the real figures
        os.environ.setdefault("LV_BENCH_RESULTS", str(RESULTS / "quick"))
    unknown = sorted(set(names) - set(BENCHMARKS))
    if unknown:
        parser.error(f"unknown benchmark {', '.join(unknown)}; choose from {', '.join(BENCHMARKS)}")
    guard()
    reports: list[Report] = []
    failures: dict[str, str] = {}
    recorded: dict[str, dict[str, Any] | str] = {}
    for name in names:
        started = time.monotonic()
        print(f"== {name}", flush=True)
        if name in COMPARED and not args.quick:  # before the run overwrites it
            last = read_recorded(results_dir() / f"{name}.json")
            if last is not None:
                recorded[name] = last
        outcome = run_one(name, args.quick, budget)
        if isinstance(outcome, Report):
            reports.append(outcome)
        else:  # one failing benchmark must not hide the others' figures
            failures[name] = outcome
            print(f"== {name} failed: {outcome.strip().splitlines()[-1]}", file=sys.stderr,
                  flush=True)  # fmt: skip
        print(f"== {name}: {time.monotonic() - started:.0f} s", flush=True)
    path: Path = results_dir() / "SUMMARY.md"
    path.write_text(summary(reports, failures, args.quick, recorded))
    print(f"summary written to {path}")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
