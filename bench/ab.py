"""Two checkouts, one machine: benchmarks run alternately before and after a change.

    .venv/bin/python -m bench.ab --before ../old-checkout [--only fanout,memory,latency]
        [--rounds 2] [--args latency="--seconds 30 --rates 100,1000"] [--quick]
        [--before-args latency="--configurations tuned"] [--pair latency:realtime=tuned]

Each round runs every named benchmark once in the ``--before`` checkout (with that checkout's
own ``.venv``, so that its code and its installed package are the ones measured) and once in
this one, alternating, so that the machine's drift over the run falls on both sides alike.
The headline figures of each run (``HEADLINES``) are then set side by side with each side's
median and the change between medians, printed, and written to
``bench/results/ab/<when>.md`` and ``.json``. A change smaller than the spread of either
side's rounds is noise, not a regression.

Where the two checkouts run a system differently by default (a pipeline a change moved into
Real-Time Mode, say), ``--before-args`` gives the before side arguments of its own and
``--pair`` sets one configuration's figures after the change beside another's before it: each
row then names both.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.common import RESULTS
from bench.processes import guard, stop_descendants

HERE = Path(__file__).resolve().parents[1]

HEADLINES = {
    "fanout": r"(latency_ms\.p(50|99)|server_cpu_us_per_delivery|server_rss_bytes)$",
    "memory": r"^(sse|ws)\.(bare_uvicorn_)?bytes_per_subscriber$",
    "latency": r"^(tuned|realtime)( on kafka)?\[[^]]*\]\.(push|polling)\.p(50|99)_ms$",
    "floor": r"_us(\.|$)",
    "filters": r"(latency_ms\.p(50|99)|server_cpu_us_per_delivery)$",
    "kafkalog": r"^drain\.[a-z]+_by_[a-z_]+\.events_per_s_wall$",
}
"""Which figures of a benchmark's JSON are compared (regular expressions over flattened keys)."""


def flatten(value: Any, prefix: str = "") -> dict[str, float]:
    """Every number in ``value``, keyed by its path (``a.b[2].c``)."""
    out: dict[str, float] = {}
    if isinstance(value, dict):
        for k, v in value.items():
            out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out.update(flatten(v, f"{prefix}[{_label(i, v)}]"))
    elif isinstance(value, int | float) and not isinstance(value, bool):
        out[prefix] = float(value)
    return out


def _label(i: int, item: Any) -> str:
    """A list item's place, with what it was run as when it says (a contender, a size, a
    rate), so that a row reads without the JSON beside it."""
    if not isinstance(item, dict):
        return str(i)
    said = [f"{item[k]}" for k in ("contender", "subscribers", "rate") if k in item]
    return ":".join([str(i), *said])


def run_once(checkout: Path, name: str, args: list[str], results: Path) -> dict[str, float]:
    """One run of ``bench.<name>`` in ``checkout``; its headline figures."""
    python = checkout / ".venv" / "bin" / "python"
    if not python.exists():
        python = Path(sys.executable)
    env = {**os.environ, "LV_BENCH_RESULTS": str(results), "PYTHONPATH": str(checkout),
           "PYSPARK_PYTHON": str(python)}  # fmt: skip
    results.mkdir(parents=True, exist_ok=True)
    started = time.time()
    try:
        subprocess.run([str(python), "-m", f"bench.{name}", *args], cwd=checkout, env=env,
                       check=True, stdout=subprocess.DEVNULL)  # fmt: skip
    finally:  # the other side's run must not share the machine with what this one left
        stop_descendants()
    return headlines(name, results, started)


def headlines(name: str, results: Path, since: float) -> dict[str, float]:
    """The headline figures of the run of ``bench.<name>`` that wrote into ``results`` since
    ``since`` (epoch seconds): its ``<name>.json``, or the ``<name>_<variant>.json`` that some
    arguments make it write instead (``bench.latency --logs redis,kafka``)."""
    written = [p for p in [*results.glob(f"{name}.json"), *results.glob(f"{name}_*.json")]
               if p.stat().st_mtime >= since]  # fmt: skip
    if not written:
        raise SystemExit(f"bench.{name} wrote no {name}.json nor {name}_*.json in {results}")
    newest = max(written, key=lambda p: p.stat().st_mtime)
    figures = json.loads(newest.read_text())["figures"]
    pattern = re.compile(HEADLINES.get(name, r"."))
    return {k: v for k, v in flatten(figures).items() if pattern.search(k)}


def paired(figures: dict[str, float], pairs: dict[str, str]) -> dict[str, float]:
    """The after side's ``figures`` keyed as the before side's that they are set beside: with
    ``pairs`` ``{"realtime": "tuned"}``, ``realtime[1:100].push.p50_ms`` becomes
    ``tuned[1:100].push.p50_ms``, and after's own ``tuned`` figures are left out."""
    out = {}
    for key, value in figures.items():
        head, bracket, rest = key.partition("[")
        if head in pairs:
            out[f"{pairs[head]}{bracket}{rest}"] = value
        elif head not in pairs.values():
            out[key] = value
    return out


def compare(
    before: list[dict[str, float]],
    after: list[dict[str, float]],
    pairs: dict[str, str] | None = None,
) -> list[list[str]]:
    """A row for each figure both sides have; a paired row names what ran after the change."""
    pairs = pairs or {}
    shown_as = {b: f" (after: {a})" for a, b in pairs.items()}
    after = [paired(r, pairs) for r in after]
    rows = []
    for key in sorted(set().union(*before, *after)):
        b = [r[key] for r in before if key in r]
        a = [r[key] for r in after if key in r]
        if not a or not b:
            continue
        mb, ma = statistics.median(b), statistics.median(a)
        change = f"{(ma - mb) / mb * 100:+.1f}%" if mb else "n/a"
        label = key + shown_as.get(key.partition("[")[0], "")
        rows.append([label, " / ".join(f"{x:g}" for x in b), " / ".join(f"{x:g}" for x in a),
                     f"{mb:g}", f"{ma:g}", change])  # fmt: skip
    return rows


def table(name: str, rows: list[list[str]]) -> str:
    head = ["figure", "before (rounds)", "after (rounds)", "median before", "median after",
            "change"]  # fmt: skip
    lines = [f"### {name}", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.ab", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--before", required=True, type=Path, help="the other checkout")
    parser.add_argument("--only", default="fanout,memory,latency")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--args",
        action="append",
        default=[],
        metavar="NAME=ARGS",
        help="extra arguments for one benchmark, e.g. latency='--seconds 30'",
    )
    parser.add_argument(
        "--before-args",
        action="append",
        default=[],
        metavar="NAME=ARGS",
        help="arguments for one benchmark in the before checkout only (default: --args)",
    )
    parser.add_argument(
        "--pair",
        action="append",
        default=[],
        metavar="NAME:AFTER=BEFORE",
        help="set a configuration's figures after the change beside another's before it, "
        "e.g. latency:realtime=tuned",
    )
    parser.add_argument("--quick", action="store_true", help="tiny sizes: check the harness")
    opts = parser.parse_args(argv)
    guard()
    before = opts.before.resolve()
    if not (before / "bench").is_dir():
        parser.error(f"{before} is not a Liveviews checkout (it has no bench/)")
    extra = {n: shlex.split(a) for n, _, a in (s.partition("=") for s in opts.args)}
    extra_before = {
        **extra,
        **{n: shlex.split(a) for n, _, a in (s.partition("=") for s in opts.before_args)},
    }
    pairs: dict[str, dict[str, str]] = {}
    for spec in opts.pair:
        name, _, pair = spec.partition(":")
        after_name, eq, before_name = pair.partition("=")
        if not (name and after_name and eq and before_name):
            parser.error(f"--pair {spec!r}: write NAME:AFTER=BEFORE, e.g. latency:realtime=tuned")
        pairs.setdefault(name, {})[after_name] = before_name
    names = [n for n in opts.only.split(",") if n]
    when = time.strftime("%Y%m%d-%H%M%S")
    work = RESULTS / "ab" / when
    runs: dict[str, dict[str, list[dict[str, float]]]] = {
        n: {"before": [], "after": []} for n in names
    }
    for i in range(opts.rounds):
        for name in names:
            for side, checkout in (("before", before), ("after", HERE)):
                args = ["--quick"] * opts.quick + (extra_before if side == "before" else extra).get(
                    name, []
                )
                started = time.monotonic()
                figures = run_once(checkout, name, args, work / f"{side}-{i}")
                runs[name][side].append(figures)
                print(
                    f"round {i + 1}: {name} {side}: {time.monotonic() - started:.0f} s", flush=True
                )
    report = [f"# A/B: {before} (before) against {HERE} (after), {opts.rounds} rounds, {when}", ""]
    for name in names:
        rows = compare(runs[name]["before"], runs[name]["after"], pairs.get(name))
        report.append(table(name, rows))
    text = "\n".join(report)
    print(text)
    (RESULTS / "ab" / f"{when}.md").write_text(text)
    (RESULTS / "ab" / f"{when}.json").write_text(json.dumps(runs, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
