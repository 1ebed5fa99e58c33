"""The bounds' pipelines compute what they stand in for: a bound that computed less, or
something else, would be no bound."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from bench import ceilings
from liveviews.pipeline.views import EVENT_SCHEMA

T0 = 1_767_225_600_000


def renames(spark: Any) -> Any:
    """Two renames of ``a`` listed newest first (log order is by offset, not by row), one of
    ``b`` without an avatar, and events of other types."""
    rows = [
        (1, f"{T0}-1", "profile_set", "a", '{"user":"a","name":"newer","avatar":"x.png"}', T0),
        (1, f"{T0}-0", "profile_set", "a", '{"user":"a","name":"older"}', T0),
        (2, f"{T0 + 5}-0", "profile_set", "b", '{"user":"b","name":"bee"}', T0),
        (2, f"{T0 + 6}-0", "tweet_posted", "b", '{"user":"b","tweet":"b:1","text":"hi"}', T0),
        (1, f"{T0 + 7}-0", "follow", "a", '{"user":"b","followee":"a"}', T0),
    ]
    return spark.createDataFrame([(*r, T0) for r in rows], EVENT_SCHEMA)


@pytest.mark.parametrize("kind", list(ceilings.LATENCY_KINDS))
def test_latency_bound_keeps_each_users_newest_profile(spark: Any, kind: str) -> None:
    app = ceilings.profile_app(kind)
    assert list(app.views) == ["profiles"]
    out = app.pipelines[kind].build(renames(spark)).collect()
    assert {(r["view"], r["key"], r["row"]): orjson.loads(r["value"]) for r in out} == {
        ("profiles", "a", "profile"): {"user": "a", "name": "newer", "avatar": "x.png"},
        ("profiles", "b", "profile"): {"user": "b", "name": "bee", "avatar": None},
    }
    # The sink compares values as text: both bounds write the keys in the same order.
    assert {r["value"] for r in out if r["key"] == "b"} == {
        '{"avatar":null,"name":"bee","user":"b"}'
    }


def test_drain_bound_counts_each_keys_events_in_log_order(spark: Any) -> None:
    app = ceilings.app("spark_aggregation")
    assert list(app.views) == ["event_counts"]
    # Log order compares an offset's sequence as a number: 10 comes after 9.
    later = [(1, f"{T0 + 7}-{seq}", "like", "a", '{"user":"a","tweet":"b:1"}', T0, T0)
             for seq in (10, 9)]  # fmt: skip
    events = renames(spark).union(spark.createDataFrame(later, EVENT_SCHEMA))
    out = app.pipelines["spark_aggregation"].build(events).collect()
    assert {(r["view"], r["key"], r["row"]): orjson.loads(r["value"]) for r in out} == {
        ("event_counts", "a", "count"): {"events": 5, "newest": f"{T0 + 7}-10"},
        ("event_counts", "b", "count"): {"events": 2, "newest": f"{T0 + 6}-0"},
    }
    with pytest.raises(ValueError, match="unknown ceiling"):
        ceilings.app("nothing")


def test_latency_bounds_are_applications_lv_app_can_name() -> None:
    from liveviews.app import load_app

    for kind in ceilings.LATENCY_KINDS:
        assert load_app(f"bench.ceilings:{kind.upper()}").pipelines.keys() == {kind}
    with pytest.raises(ValueError, match="unknown latency bound"):
        ceilings.profile_app("nothing")


def test_latency_benchmark_runs_each_bound_on_its_application(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from bench import latency, latencyreport
    from liveviews.app import load_app

    for kind in ceilings.LATENCY_KINDS:
        assert load_app(latency.configuration_env(kind)["LV_APP"]).name == f"bound_{kind}"
    # Chirp's profiles in micro-batches, as before it declared Real-Time Mode; "realtime" as declared.
    assert latency.configuration_env("tuned") == {"LV_REALTIME": "off"}
    assert latency.configuration_env("realtime") == {"LV_REALTIME": "on"}
    assert latency.configuration_env("untuned") is latency.UNTUNED
    # The plot takes bounds that ran fewer phases than Chirp's views.
    monkeypatch.setenv("LV_BENCH_RESULTS", str(tmp_path))

    def phases(n: int) -> list[dict[str, Any]]:
        return [{"rate": r, "pushed_ms": [120.0, 150.0], "polled_ms": [700.0]}
                for r in latency.RATES[:n]]  # fmt: skip

    results = {"tuned": phases(4), **{k: phases(latency.BOUND_PHASES)
                                      for k in ceilings.LATENCY_KINDS}}  # fmt: skip
    (path,) = latencyreport.plot(results)
    assert path == tmp_path / "latency_cdf.png" and path.stat().st_size > 0


def test_latency_rows_on_kafka_compare_with_the_stores_same_phase(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from bench import latencyreport as report

    monkeypatch.setenv("LV_BENCH_RESULTS", str(tmp_path))

    def phase(rate: int, p50: float, p99: float) -> dict[str, Any]:
        push = {"p50_ms": p50, "p95_ms": p99, "p99_ms": p99, "max_ms": p99,
                "reflected_fraction": 1.0}  # fmt: skip
        return {"rate": rate, "push": push, "polling": push, "after_pipeline_start_s": 60.0,
                "pushed_ms": [p50, p99], "polled_ms": [900.0]}  # fmt: skip

    results = {
        "realtime": [phase(100, 12, 90), phase(100, 11, 40)],
        report.result_key("realtime", "kafka"): [phase(100, 5800, 8600), phase(100, 23, 317)],
    }
    rows = report.summary_rows(results, [100, 100], 30)
    kafka = [r for r in rows if "Kafka log" in r.figure]
    assert [r.measured for r in kafka] == ["5800 / 8600 / 8600 / 8600", "23 / 317 / 317 / 317"]
    assert [r.baseline for r in kafka] == [
        "the store's log, same phase: p50 12 / p99 90",
        "the store's log, same phase: p50 11 / p99 40",
    ]
    assert "100 events/s, again" in kafka[1].figure and "realtime" in kafka[1].figure
    # The store's own rows are those of a run without Kafka.
    assert len(rows) - len(kafka) == len(report.summary_rows(
        {"realtime": results["realtime"]}, [100, 100], 30))  # fmt: skip
    (path,) = report.plot(results, "latency_kafka")
    assert path == tmp_path / "latency_kafka_cdf.png" and path.stat().st_size > 0
