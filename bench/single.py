"""One benchmark of the harness, in a process of its own.

    .venv/bin/python -m bench.single NAME [--quick] --report FILE

``python -m bench`` runs each benchmark this way, so that a SparkSession, a store or a thread
one benchmark leaves behind cannot load the machine under the next, and so that a benchmark
past its time budget can be stopped with everything it started (``bench.processes``). The
benchmark's report goes to ``FILE`` as JSON; if it fails, its traceback goes to ``FILE.error``.
"""

from __future__ import annotations

import argparse
import importlib
import traceback
from pathlib import Path

from bench.processes import guard


def error_path(report: Path) -> Path:
    return report.with_name(report.name + ".error")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.single",
                                     description=__doc__.split("\n\n")[0])  # fmt: skip
    parser.add_argument("name")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--report", type=Path, required=True)
    args = parser.parse_args(argv)
    guard(die_with_parent=True)  # the harness's death, even by SIGKILL, ends it too
    try:
        module = importlib.import_module(f"bench.{args.name}")
        report = module.run(quick=args.quick)
    except BaseException:
        error_path(args.report).write_text(traceback.format_exc())
        raise
    args.report.write_bytes(report.dumps())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
