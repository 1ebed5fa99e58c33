"""The benchmark harness: every benchmark, then one summary.

    .venv/bin/python -m bench [--quick] [--only latency,fanout,...]

Each benchmark writes ``bench/results/<name>.json`` (its figures, the machine and the
versions) and its PNG plots; this command then writes ``bench/results/SUMMARY.md`` with each
target beside the measured figure and the same-run baseline. ``--quick`` runs every benchmark
at a tiny size, only to show the harness works (the CI runs it); its figures mean nothing and
go to ``bench/results/quick/`` (or ``$LV_BENCH_RESULTS``).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import time
import traceback
from pathlib import Path

from bench.common import RESULTS, Report, machine, results_dir
from bench.moment import describe

BENCHMARKS = [
    "fanout", "gateways", "floor", "memory", "store", "publish", "storecluster", "deadletters",
    "latency", "browser", "cdc", "pipeline", "rebuild",
]  # fmt: skip
"""In order: the gateway's own figures first, then the store's, then those with Spark in the
loop."""


def summary(reports: list[Report], failures: dict[str, str], quick: bool) -> str:
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
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes: check the harness")
    parser.add_argument("--only", default="", help="comma-separated: " + ",".join(BENCHMARKS))
    args = parser.parse_args(argv)
    names = [n for n in args.only.split(",") if n] or BENCHMARKS
    if args.quick:  # never over the real figures
        os.environ.setdefault("LV_BENCH_RESULTS", str(RESULTS / "quick"))
    unknown = sorted(set(names) - set(BENCHMARKS))
    if unknown:
        parser.error(f"unknown benchmark {', '.join(unknown)}; choose from {', '.join(BENCHMARKS)}")
    reports: list[Report] = []
    failures: dict[str, str] = {}
    for name in names:
        started = time.monotonic()
        print(f"== {name}", flush=True)
        try:
            module = importlib.import_module(f"bench.{name}")
            reports.append(module.run(quick=args.quick))
        except Exception:  # one failing benchmark must not hide the others' figures
            failures[name] = traceback.format_exc()
            print(failures[name], file=sys.stderr, flush=True)
        print(f"== {name}: {time.monotonic() - started:.0f} s", flush=True)
    path: Path = results_dir() / "SUMMARY.md"
    path.write_text(summary(reports, failures, args.quick))
    print(f"summary written to {path}")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
