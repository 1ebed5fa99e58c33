"""``bench.ab``'s comparison: figures set side by side, and configurations paired across
checkouts that run the system differently by default."""

import json
import os
import time
from pathlib import Path

from bench.ab import compare, flatten, headlines

BEFORE = [
    {"tuned[0:100].push.p50_ms": 400.0, "tuned[1:100].push.p50_ms": 300.0},
    {"tuned[0:100].push.p50_ms": 500.0, "tuned[1:100].push.p50_ms": 320.0},
]


def test_same_configuration_is_compared_by_median() -> None:
    after = [{"tuned[1:100].push.p50_ms": 150.0}, {"tuned[1:100].push.p50_ms": 170.0}]
    assert compare(BEFORE, after) == [
        ["tuned[1:100].push.p50_ms", "300 / 320", "150 / 170", "310", "160", "-48.4%"]
    ]


def test_a_pair_sets_one_configuration_beside_another() -> None:
    after = [
        {"realtime[0:100].push.p50_ms": 20.0, "tuned[0:100].push.p50_ms": 900.0},
        {"realtime[0:100].push.p50_ms": 30.0, "tuned[0:100].push.p50_ms": 800.0},
    ]
    rows = compare(BEFORE, after, {"realtime": "tuned"})
    # after's own micro-batch figures are not what the pair compares, so they are left out
    assert rows == [
        ["tuned[0:100].push.p50_ms (after: realtime)", "400 / 500", "20 / 30", "450", "25",
         "-94.4%"]
    ]  # fmt: skip


def test_flatten_labels_list_items_by_what_they_ran() -> None:
    figures = {"tuned": [{"rate": 100, "push": {"p50_ms": 1.5}}]}
    assert flatten(figures) == {"tuned[0:100].rate": 100.0, "tuned[0:100].push.p50_ms": 1.5}


def test_headlines_are_read_from_the_file_the_run_wrote(tmp_path: Path) -> None:
    """``bench.latency --logs redis,kafka`` writes latency_kafka.json, not latency.json; an
    older file of the same benchmark is not this run's."""
    since = time.time() - 1
    (tmp_path / "latency.json").write_text(json.dumps({"figures": {"tuned": []}}))
    phase = {"rate": 100, "push": {"p50_ms": 40.0, "max_ms": 90.0}}
    figures = {"tuned on kafka": [phase], "realtime": [phase]}
    (tmp_path / "latency_kafka.json").write_text(json.dumps({"figures": figures}))
    old = time.time() - 3600
    os.utime(tmp_path / "latency.json", (old, old))
    assert headlines("latency", tmp_path, since) == {
        "tuned on kafka[0:100].push.p50_ms": 40.0,
        "realtime[0:100].push.p50_ms": 40.0,
    }
