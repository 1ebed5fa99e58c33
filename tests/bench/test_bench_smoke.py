"""The benchmark harness still works: every benchmark runs at a tiny size and reports.

The figures of such a run mean nothing; ``python -m bench`` without ``--quick`` measures.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_quick_run_of_every_benchmark(tmp_path: Path) -> None:
    env = {**os.environ, "LV_BENCH_RESULTS": str(tmp_path)}
    env.pop("REDIS_URL", None)
    done = subprocess.run([sys.executable, "-m", "bench", "--quick"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=900)  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    summary = (tmp_path / "SUMMARY.md").read_text()
    from bench.__main__ import BENCHMARKS

    for name in BENCHMARKS:
        result = json.loads((tmp_path / f"{name}.json").read_text())
        assert result["figures"], name
        assert result["machine"]["cores"] >= 1
        assert result["moment"]["probe_before"]["round_trip_us"] > 0, name
    phase = json.loads((tmp_path / "latency.json").read_text())["figures"]["tuned"][0]
    assert phase["after_pipeline_start_s"] > 0
    assert phase["driver_jvm_cpu_s"] > phase["driver_jit_cpu_s"] > 0  # found the pipeline's JVM
    from bench.pipeline import COLD_VARIANTS

    cold = json.loads((tmp_path / "pipeline.json").read_text())["figures"]["cold_start"]
    assert cold.keys() == COLD_VARIANTS.keys() and all(v["median_s"] > 0 for v in cold.values())
    assert "| figure | measured | target | same-run baseline |" in summary
    assert "failed" not in summary
    assert summary.count("The machine during this benchmark") == len(BENCHMARKS)
    assert list(tmp_path.glob("*.png")), "no plot was drawn"
