"""The soak benchmark at its quick size: it runs, and its results carry the figures.

``python -m bench.soak --quick`` starts its own store and gateway process, holds ~200 SSE
subscribers for ~20 s while deltas are written, and must report RSS and fds that stayed flat.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parents[2]


def test_the_quick_soak_reports_flat_memory_and_descriptors(tmp_path: Path) -> None:
    env = {**os.environ, "LV_BENCH_RESULTS": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", "bench.soak", "--quick"], cwd=ROOT, env=env,
        capture_output=True, text=True, timeout=40,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    figures = orjson.loads((tmp_path / "soak.json").read_bytes())["figures"]
    assert (tmp_path / "soak.png").stat().st_size > 10_000
    assert figures["subscribers_connected"] == figures["subscribers"] == 200
    assert figures["rss_flat"] and figures["fds_flat"]
    assert figures["streams_ended_by_gateway"] == 0
    # Every subscriber of a key receives each of its deltas, give or take the edges of a sample.
    assert figures["deliveries_per_second_mean"] > 0.8 * figures["deliveries_per_second_expected"]
    samples = figures["samples"]
    assert len(samples) >= 15
    for name in ("rss_bytes", "fds", "deliveries_per_second", "latency_p50_ms", "latency_p99_ms"):
        assert all(name in s for s in samples), name
    assert figures["fds_end"] >= 200  # one per subscriber, held to the end
