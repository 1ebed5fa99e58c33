"""What ``bench.rebuild`` reports: its rows (each window's latency against the window before the
rebuilds, each rebuild's time, the readers' resets) and the plot of readers' latency."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.common import Row, save_plot

if TYPE_CHECKING:
    from bench.rebuild import Run


def _stats(push: dict[str, Any]) -> str:
    return (f"{push['p50_ms']:.0f} / {push['p95_ms']:.0f} / {push['p99_ms']:.0f}"
            f" / {push['max_ms']:.0f}")  # fmt: skip


def _resets(r: dict[str, Any]) -> str:
    each = " or ".join(map(str, r["view_replaced_per_subscriber"]))
    codes = ", ".join(f"{n} {code}" for code, n in sorted(r["resets"].items()))
    return f"{codes or 'none'} ({each} view_replaced per subscriber)"


def rows(figures: dict[str, Any]) -> list[Row]:
    windows = {w["window"]: w for w in figures["windows"]}
    before = windows["before the rebuilds"]["push"]
    base = f"before the rebuilds: {_stats(before)} (n {before['n']})"
    drained = figures["drain"]
    out = [
        Row(
            f"drain of {drained['events']:,} Chirp events by the pipeline process (the"
            " serving version)",
            f"{drained['events_per_s_from_first_batch']:,} events/s"
            f" ({drained['seconds_from_first_batch']} s from its first batch;"
            f" {drained['seconds_from_process_start']} s from the process's start)",
        )
    ]
    for w in figures["windows"]:
        push = w["push"]
        rebuilding = w["window"].startswith("rebuilding")
        out.append(Row(
            f"POST to SSE delta at {figures['rate_events_per_s']} events/s, {w['window']}"
            f" ({w['seconds']:.0f} s; machine {w['machine_busy_pct']:.0f}% busy, the builder"
            f" {w['builder_cores']} cores, other people's processes {w['other_cores']}"
            " cores),"
            " p50 / p95 / p99 / max (ms)",
            f"{_stats(push)} (n {push['n']}, reflected {push['reflected_fraction']:.1%})"
            + (f"; p99 {push['p99_ms'] / before['p99_ms']:.1f}x before" if rebuilding else ""),
            target="p99 <= 500, the bound at 100 events/s: "
                   + ("met" if push["p99_ms"] <= 500 else "not met") if rebuilding else "",
            baseline=base if rebuilding else "",
        ))  # fmt: skip
    for w in figures["windows"]:
        calls = w.get("store_long_calls")
        if calls:
            out.append(Row(
                f"store calls of 5 ms or more, {w['window']}: how long they held the store"
                " (other clients wait behind each), of which the version being built",
                f"{calls['calls']} calls, {calls['held_pct']}% of the window, longest"
                f" {calls['max_ms']:.0f} ms; building {calls['building_calls']} calls,"
                f" {calls['building_held_pct']}%, longest {calls['building_max_ms']:.0f} ms",
            ))  # fmt: skip
    for r in figures["rebuilds"]:
        out.append(Row(
            f"rebuild of {r['pipeline']} ({r['events_in_log_at_switch']:,} events in the log at"
            " the switch): request to the switch of lv:{m}:active",
            f"{r['request_to_switch_s']} s: {r['events_per_s_from_request']:,} events/s"
            f" ({r['events_per_s_from_first_batch']:,} from its first batch, which began"
            f" {r['request_to_switch_s'] - (r['first_batch_to_switch_s'] or 0):.1f} s after"
            " the request)",
            baseline=f"drain of the serving version:"
                     f" {drained['events_per_s_from_first_batch']:,} events/s",
        ))  # fmt: skip
    for view, r in figures["readers"].items():
        out.append(Row(
            f"{view}: resets sent to its {r['subscribers']} subscribers; rows equal to the"
            " serving version's snapshot at the end",
            f"{_resets(r)}; {r['rows_equal_serving_snapshot']} of {r['subscribers']}",
            target="one view_replaced each when its pipeline was rebuilt; all equal",
        ))  # fmt: skip
    return out


def plot_timeline(run: Run, name: str) -> Path:
    """The readers' latency through the run, in ``<name>_latency.png`` beside its figures."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t0 = run.windows[0].start
    fig, ax = plt.subplots(figsize=(11, 4))
    xs = [sent - t0 for sent, _ in run.renames.timed]
    ax.scatter(xs, [ms for _, ms in run.renames.timed], s=2, alpha=0.5)
    colours = {"rebuilding": "tab:orange", "after the switch": "tab:green"}
    for w in run.windows:
        colour = next((c for k, c in colours.items() if w.name.startswith(k)), None)
        if colour:
            ax.axvspan(w.start - t0, w.end - t0, color=colour, alpha=0.12, label=w.name)
    ax.set_yscale("log")
    ax.set_xlabel("seconds since the writer started (when the rename was posted)")
    ax.set_ylabel("POST to SSE frame (ms)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    return save_plot(fig, f"{name}_latency")
