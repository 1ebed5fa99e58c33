"""This run's headline figures against the last recorded run's: which moved beyond the noise.

A full ``python -m bench`` overwrites ``bench/results/<name>.json``; the harness reads the file
of each benchmark in ``COMPARED`` before that benchmark runs (:func:`read_recorded`), and the
summary gets a section (:func:`against_last_run`) with each headline figure (``bench.ab``'s
``HEADLINES``) of both runs side by side. The rule:

- Only times are compared (a key with ``_ms`` or ``_us`` in it: latencies, CPU per delivery),
  because only a time moves with the machine's speed, which the probes measure, and a time is
  worse when higher. The fan-out's ``server_rss_bytes`` headline is left out: the probes say
  nothing about memory.
- The machine's change is each probe's ratio, this run over the last (``bench.moment``: the
  Python loop and the round trip between two processes, each the mean of its before and after
  the benchmark). The probes often disagree (a slow moment of the host slows the round trip
  most), so a figure gets the benefit of the doubt: the change it is allowed is anywhere from
  none at all (a figure that does not scale with the machine, such as polling once a second)
  to the larger of the two probes' changes.
- A figure **moved** when its ratio, this run over the last, lies beyond that span by more than
  its noise band (``BAND``, or ``TAIL_BAND`` for a p9x): worse above it, better below it.
  Otherwise it is **within noise**. A regression that a faster moment of the machine hides is
  missed; that is the price of not calling every slow moment a regression.

Rows of a same-run baseline (nginx+nchan, the naive gateway, polling) are controls: when they
moved too, suspect the machine before the code.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson

from bench.ab import HEADLINES, flatten

COMPARED = ("fanout", "latency")
"""The benchmarks whose headline figures a full run compares with the last recorded run's."""
BAND = 1.6
"""Between two rounds of the same code at one moment, a p50 latency moved by up to 1.53x and a
CPU per delivery by up to 1.29x (docs/performance/layout-ab.md): a band just above both."""
TAIL_BAND = 2.5
"""A p99 rests on its run's slowest 1%, and moved by up to 2.35x between such rounds (once 4x,
which this band still calls moved)."""
PROBES = {"python_loop_ms": "loop", "round_trip_us": "round trip"}
"""The probes of ``bench.moment`` that time the machine, and their names in the table."""

TIME = re.compile(r"_(ms|us)(\.|_|$)")
TAIL = re.compile(r"\bp9\d")
HEAD = [
    "figure", "last run", "this run", "change", "the machine's change (probes)", "verdict",
]  # fmt: skip


def read_recorded(path: Path) -> dict[str, Any] | str | None:
    """The result file at ``path`` (read before this run overwrites it): its contents, None
    when there is none, or a sentence saying why it cannot be compared."""
    try:
        recorded = orjson.loads(path.read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, orjson.JSONDecodeError) as exc:
        return f"The last recorded {path.name} could not be read ({exc}), so nothing is compared."
    if not isinstance(recorded, dict) or not isinstance(recorded.get("figures"), dict):
        return f"The last recorded {path.name} holds no figures, so nothing is compared."
    return recorded


def headline_times(name: str, figures: dict[str, Any]) -> dict[str, float]:
    """The headline figures of benchmark ``name`` that are times, by flattened key."""
    pattern = re.compile(HEADLINES.get(name, r"."))
    return {k: v for k, v in flatten(figures).items() if pattern.search(k) and TIME.search(k)}


def speed(moment: Any) -> dict[str, float]:
    """Each probe's mean over before and after the benchmark; none that the moment lacks."""
    if not isinstance(moment, dict):
        return {}
    sides = [moment.get(side) for side in ("probe_before", "probe_after")]
    out = {}
    for probe in PROBES:
        values = [side.get(probe) for side in sides if isinstance(side, dict)]
        numbers = [float(v) for v in values if isinstance(v, int | float) and v > 0]
        if numbers:
            out[probe] = sum(numbers) / len(numbers)
    return out


def machine_change(last: Any, this: Any) -> dict[str, float]:
    """Each probe's ratio, this run's moment over the last run's: above 1, a slower machine."""
    before, after = speed(last), speed(this)
    return {probe: after[probe] / before[probe] for probe in PROBES if probe in before and after}


def verdict(key: str, ratio: float, machine: Mapping[str, float]) -> str:
    """Whether a time that went from 1 to ``ratio`` moved, the machine's change discounted."""
    if not machine:
        return "cannot tell: a run without probes"
    lowest, highest = min(1.0, *machine.values()), max(1.0, *machine.values())
    band = TAIL_BAND if TAIL.search(key) else BAND
    if ratio > highest * band:
        return "moved: worse"
    if ratio < lowest / band:
        return "moved: better"
    return "within noise"


def which_run(machine: Any) -> str:
    """When a run was, and which commit it measured if it says (older files do not)."""
    if not isinstance(machine, dict):
        return "at an unrecorded date"
    said = str(machine.get("when", "at an unrecorded date"))
    if machine.get("commit"):
        said += f", commit {machine['commit']}"
        if machine.get("uncommitted_changes"):
            said += " with uncommitted changes"
    return said


def compare(name: str, last: dict[str, Any], this: dict[str, Any]) -> list[str]:
    """The lines for benchmark ``name``: which runs, then a row per headline time."""
    before = headline_times(name, last["figures"])
    after = headline_times(name, this.get("figures", {}))
    machine = machine_change(last.get("moment"), this.get("moment"))
    probes = ", ".join(f"{PROBES[p]} {r:.2f}x" for p, r in machine.items()) or "no probes"
    rows, moved, skipped = [], [], 0
    for key in [k for k in before if k in after]:  # in the benchmark's own order
        old, new = before[key], after[key]
        if not (old > 0 and math.isfinite(old) and math.isfinite(new)):
            skipped += 1
            continue
        said = verdict(key, new / old, machine)
        if said.startswith("moved"):
            moved.append(f"{key} ({said.removeprefix('moved: ')})")
            said = f"**{said}**"
        rows.append([key, f"{old:g}", f"{new:g}", f"{new / old:.2f}x", probes, said])
    listed = ": " + ", ".join(moved) if moved else ""
    lines = [
        f"### {name}",
        "",
        f"Last recorded run: {which_run(last.get('machine'))}; this run: "
        f"{which_run(this.get('machine'))}. {len(moved)} of {len(rows)} headline times moved"
        f"{listed}.",
        "",
    ]
    unmatched = len(before.keys() ^ after.keys()) + skipped
    if unmatched:
        lines += [f"{unmatched} headline times are in one run only or not a number: not "
                  "compared.", ""]  # fmt: skip
    if rows:
        lines += ["| " + " | ".join(HEAD) + " |", "|" + "---|" * len(HEAD)]
        lines += ["| " + " | ".join(row) + " |" for row in rows] + [""]
    return lines


def against_last_run(
    recorded: Mapping[str, dict[str, Any] | str], this_run: Mapping[str, dict[str, Any]]
) -> list[str]:
    """The summary's section: for each benchmark of ``COMPARED`` that this run measured and
    that has a recorded run (``read_recorded``), the comparison; no lines when there is none.

    ``this_run`` maps a benchmark to its figures as its result file holds them (``figures``,
    ``moment``, ``machine``).
    """
    names = [n for n in COMPARED if n in recorded and n in this_run]
    if not names:
        return []
    lines = [
        "## Against the last recorded run",
        "",
        "Each headline time beside the last full run's. A figure moved when its change lies "
        "beyond the machine's own change, as the probes measured it (anywhere from none to the "
        f"larger probe's), by more than {BAND}x ({TAIL_BAND}x for a p99); rows of a same-run "
        "baseline are controls (`bench/regression.py`).",
        "",
    ]
    for name in names:
        last = recorded[name]
        if isinstance(last, str):
            lines += [f"### {name}", "", last, ""]
        else:
            lines += compare(name, last, this_run[name])
    return lines
