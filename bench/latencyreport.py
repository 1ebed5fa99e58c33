"""What ``bench.latency`` reports: the names of its results (a configuration on a log), the
summary's rows, each phase beside its baseline, and the plot of the latency distributions."""

from __future__ import annotations

from typing import Any

from bench import ceilings
from bench.common import Row, save_plot

CONFIGURATIONS = ["tuned", "realtime", "untuned", *ceilings.LATENCY_KINDS]
LOGS = ["redis", "kafka"]


def result_key(name: str, log: str) -> str:
    """A configuration's key in the results: its name on the store's log, else with the log."""
    return name if log == "redis" else f"{name} on {log}"


def phase_title(rates: list[int], i: int) -> str:
    """``100 events/s``, or ``100 events/s, again`` for a rate that ran before in the run."""
    return f"{rates[i]} events/s" + (", again" if rates[i] in rates[:i] else "")


def plot(results: dict[str, list[dict[str, Any]]], name: str = "latency") -> list[Any]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rates = [r["rate"] for r in max(results.values(), key=len)]
    labels = {"tuned": "Liveviews, micro-batches (push)", "untuned": "Spark defaults (push)",
              "realtime": "Liveviews, Real-Time Mode (push)",
              "spark_state": "bound: one view, Spark's aggregation",
              "python_state": "bound: one view, Python operator"}  # fmt: skip
    for configuration in list(labels):
        for log in LOGS[1:]:
            labels[result_key(configuration, log)] = labels[configuration].replace(
                " (push)", f" on {log} (push)"
            )
    fig, axes = plt.subplots(1, len(rates), figsize=(5 * len(rates), 4), squeeze=False)
    for ax, i in zip(axes[0], range(len(rates)), strict=True):
        lines = [(labels.get(name, name), runs[i]["pushed_ms"]) for name, runs in results.items()
                 if i < len(runs)]  # fmt: skip
        if "tuned" in results:
            lines.insert(1, ("polling every 1 s", results["tuned"][i]["polled_ms"]))
        for label, values in lines:
            if values:
                ordered = sorted(values)
                ys = [(k + 1) / len(ordered) for k in range(len(ordered))]
                ax.plot(ordered, ys, label=label)
        ax.set_xscale("log")
        ax.set_title(phase_title(rates, i))
        ax.set_xlabel("POST to delta at the subscriber (ms)")
        ax.set_ylabel("fraction of deliveries")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    return [save_plot(fig, f"{name}_cdf")]


def _measured(push: dict[str, float]) -> str:
    """p50 / p95 / p99 / max, in whole milliseconds."""
    return " / ".join(f"{push[k]:.0f}" for k in ("p50_ms", "p95_ms", "p99_ms", "max_ms"))


def _beside(label: str, results: dict[str, list[dict[str, Any]]], key: str, i: int) -> str:
    """A row's baseline: configuration ``key``'s push p50 / p99 in phase ``i``, named
    ``label``; nothing where that configuration did not run."""
    if key not in results:
        return ""
    other = results[key][i]["push"]
    return f"{label}, same phase: p50 {other['p50_ms']:.0f} / p99 {other['p99_ms']:.0f}"


def summary_rows(results: dict[str, list[dict[str, Any]]], rates: list[int], seconds: float
                 ) -> list[Row]:  # fmt: skip
    """The summary table's rows: each configuration's push latency per phase, beside its
    baseline (polling, micro-batches, every Chirp view, or the store's log)."""
    rows = []
    for i, r in enumerate(results.get("tuned", [])):
        push, polled = r["push"], r["polling"]
        base = f"polling 1 s: p50 {polled['p50_ms']:.0f} / p99 {polled['p99_ms']:.0f}"
        if "untuned" in results:
            u = results["untuned"][i]["push"]
            if u["reflected_fraction"] < 0.5:  # most writes never showed within the run
                base += (f"; Spark defaults: {u['reflected_fraction']:.1%} reflected within"
                         f" {seconds:.0f} s + 5 s")  # fmt: skip
            else:
                base += f"; Spark defaults: p50 {u['p50_ms']:.0f} / p99 {u['p99_ms']:.0f}"
        rows.append(Row(
            figure=f"POST to SSE delta at {phase_title(rates, i)},"
                   f" from {r['after_pipeline_start_s']:.0f} s after the pipeline's start,"
                   " p50 / p95 / p99 / max (ms)",
            measured=_measured(push),
            target="p50 <= 200, p99 <= 500" if r["rate"] == 100 else "",
            baseline=base,
        ))  # fmt: skip
    for i, r in enumerate(results.get("realtime", [])):
        rows.append(Row(
            figure=f"POST to SSE delta at {phase_title(rates, i)}, Chirp's profiles in Spark's"
                   " Real-Time Mode, p50 / p95 / p99 / max (ms)",
            measured=_measured(r["push"]),
            target="p50 <= 25, p99 <= 60" if r["rate"] in (100, 1000) else "",
            baseline=_beside("micro-batches", results, "tuned", i),
        ))  # fmt: skip
    for kind in ceilings.LATENCY_KINDS:
        for i, r in enumerate(results.get(kind, [])):
            rows.append(Row(
                figure=f"bound: POST to SSE delta at {phase_title(rates, i)} through"
                       f" {ceilings.LATENCY_KINDS[kind]}, p50 / p95 / p99 / max (ms)",
                measured=_measured(r["push"]),
                baseline=_beside("every Chirp view", results, "tuned", i),
            ))  # fmt: skip
    for log in LOGS[1:]:
        for name in CONFIGURATIONS:
            for i, r in enumerate(results.get(result_key(name, log), [])):
                rows.append(Row(
                    figure=f"POST to SSE delta at {phase_title(rates, i)}, configuration"
                           f" {name} on a {log.capitalize()} log, p50 / p95 / p99 / max (ms)",
                    measured=_measured(r["push"]),
                    baseline=_beside("the store's log", results, name, i),
                ))  # fmt: skip
    return rows
