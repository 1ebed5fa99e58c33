"""``liveviews status``: every pipeline version against the log, batch durations, dead letters
and the gateways, read from the store as the pipeline and the gateways write it."""

from __future__ import annotations

import time
import uuid
from collections import Counter
from pathlib import Path

import orjson
import pytest
import redis

from liveviews.changes import lag
from liveviews.changes.lag import log_heads
from liveviews.changes.topic import FRONTIER_KEY
from liveviews.cli.rebuild import log_size
from liveviews.gateway.report import GATEWAYS_KEY, encode
from liveviews.log import deadletters
from liveviews.pipeline import versions
from liveviews.pipeline.settings import Settings
from tests.cli.conftest import PARTITIONS, SHARDS, Pipelines, Run, profile

PROGRESS = "lv:pipeline:progress"


def _progress(store: redis.Redis, query: str, durations: list[int], at: str = "*") -> None:
    for batch, ms in enumerate(durations):
        store.xadd(PROGRESS, {"query": query, "batch": batch, "events": 10,
                              "duration_ms": orjson.dumps({"triggerExecution": ms,
                                                           "addBatch": ms // 2})}, id=at)  # fmt: skip


def _store(store: redis.Redis, pipelines: Pipelines) -> None:
    """entities: v1 retired, v2 serving and caught up, v3 being built and behind; activity: one
    version, never advanced. Two live gateways and one that stopped reporting."""
    versions.register(store, "entities", "v1")
    versions.register(store, "activity", "a1")
    versions.begin(store, "entities", "v2", "v2")
    versions.switch(store, "entities", SHARDS)
    versions.begin(store, "entities", "v3", "v3")
    pipelines.append(*[profile(f"user{i}", "x") for i in range(12)])
    heads = log_heads(store, PARTITIONS)
    store.hset(FRONTIER_KEY, "entities@v2", orjson.dumps({str(p): h for p, h in heads.items()}))
    first = min(heads)
    store.hset(FRONTIER_KEY, "entities@v3", orjson.dumps({str(first): heads[first]}))
    _progress(store, "liveviews.entities@v2", [9000], at=f"{int(time.time() * 1000) - 600_000}-0")
    _progress(store, "liveviews.entities@v2", list(range(10, 110, 10)))
    _progress(store, "liveviews.entities@v3", [500])
    deadletters.record(store, [deadletters.letter("entities@v2", "0:1-0", "view", "boom"),
                               deadletters.letter("entities@v2", "0:2-0", "view", "boom")])  # fmt: skip
    store.hset(GATEWAYS_KEY, mapping={
        "web-1:10": encode(3, {"profiles": 2, "timeline": 1}),
        "web-2:11": encode(1, {"profiles": 1}),
        "web-3:12": encode(50, {"profiles": 50}, now=time.time() - 3600),
    })  # fmt: skip


def test_each_version_its_lag_batch_durations_and_dead_letters(
    run: Run, store: redis.Redis, pipelines: Pipelines
) -> None:
    _store(store, pipelines)
    doc = run.json("status")
    assert doc["log"]["events"] == 12 and doc["log"]["partitions"] == PARTITIONS
    assert doc["store"] == {"cluster": False, "primaries": 1}
    by_name = {p["pipeline"]: p for p in doc["pipelines"]}
    assert set(by_name) == {"entities", "profiles", "activity"}
    active, building, retired = by_name["entities"]["versions"]
    assert [v["role"] for v in (active, building, retired)] == ["active", "next", "retired"]
    assert [v["version"] for v in (active, building, retired)] == ["v2", "v3", "v1"]
    assert active["lag"] == {"events": 0, "capped": False, "seconds": 0.0}
    assert active["batches"] == {"count": 10, "p50_ms": 50.0, "p99_ms": 100.0}
    assert active["dead_letters"] == 2 and building["dead_letters"] == 0
    behind = 12 - store.xlen(f"lv:log:{min(int(p) for p in building['frontier'])}")
    assert building["lag"]["events"] == behind and not building["lag"]["capped"]
    assert building["batches"]["count"] == 1 and retired["lag"] is None
    (activity,) = by_name["activity"]["versions"]
    assert activity["lag"]["events"] == 12 and activity["frontier"] == {}
    # A gateway the suite runs elsewhere may report into the store too: count it apart.
    mine = [g for g in doc["gateways"] if g["name"].startswith("web-")]
    others = [g for g in doc["gateways"] if not g["name"].startswith("web-")]
    assert [g["name"] for g in mine] == ["web-1:10", "web-2:11"]
    assert doc["connections"] == 4 + sum(g["connections"] for g in others)
    expected = Counter({"profiles": 3, "timeline": 1})
    for g in others:
        expected.update(g["subscribers"])
    assert doc["subscribers"] == dict(expected)


def test_a_capped_lag_reads_at_least(
    run: Run, store: redis.Redis, pipelines: Pipelines, monkeypatch: pytest.MonkeyPatch
) -> None:
    _store(store, pipelines)
    monkeypatch.setattr(lag, "EVENT_CAP", 2)
    doc = run.json("status")
    activity = next(p for p in doc["pipelines"] if p["pipeline"] == "activity")["versions"][0]
    assert activity["lag"]["capped"] and activity["lag"]["events"] <= 2 * PARTITIONS
    text = run("status")
    assert text.exit_code == 0, text.stderr
    assert f"≥{activity['lag']['events']}" in text.stdout
    for shown in ("entities@v3", "web-1:10", "profiles", "at head", "nothing read"):
        assert shown in text.stdout, shown


def test_an_empty_store_and_the_window_of_batch_durations(
    run: Run, store: redis.Redis, pipelines: Pipelines
) -> None:
    doc = run.json("status")
    assert [p["versions"][0]["version"] for p in doc["pipelines"]] == [None, None, None]
    assert doc["log"]["events"] == 0
    _store(store, pipelines)
    wide = run.json("status", "--minutes", "20")
    active = next(p for p in wide["pipelines"] if p["pipeline"] == "entities")["versions"][0]
    assert active["batches"]["count"] == 11 and active["batches"]["p99_ms"] == 9000.0
    assert run("status", "--minutes", "0").exit_code == 2


def test_a_store_that_cannot_be_reached_exits_3(run: Run) -> None:
    from click.testing import CliRunner

    from liveviews.cli import cli

    env = {**run.env, "REDIS_URL": "redis://:hunter2hunter2@127.0.0.1:1/0"}
    result = CliRunner().invoke(cli, ["status", "--json"], env=env)
    assert result.exit_code == 3
    assert orjson.loads(result.stdout)["code"] == "store_unavailable"
    assert "cannot be reached" in result.stderr and "hunter2" not in result.stderr
    assert "Traceback" not in result.stderr


def test_a_wrong_setting_is_a_usage_error_and_a_bug_is_a_sentence(
    run: Run, store: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    from click.testing import CliRunner

    from liveviews.cli import cli, status

    wrong = CliRunner().invoke(cli, ["status"], env={**run.env, "LV_CHANGE_SHARDS": "many"})
    assert wrong.exit_code == 2 and "LV_CHANGE_SHARDS must be a whole number" in wrong.stderr

    def broken(*_: object) -> None:
        raise ValueError("a bug")

    monkeypatch.setattr(status, "collect", broken)
    result = run("status", "--json")
    assert result.exit_code == 1 and orjson.loads(result.stdout)["code"] == "internal_error"
    assert "ValueError: a bug" in result.stderr and "Traceback" not in result.stderr


def test_an_embedded_store_that_never_ran_here_is_said_without_making_a_password(
    run: Run, tmp_path: Path
) -> None:
    from click.testing import CliRunner

    from liveviews.cli import cli

    env = {k: v for k, v in run.env.items() if k != "REDIS_URL"}
    env["LV_DATA_DIR"] = str(tmp_path / "elsewhere")
    result = CliRunner().invoke(cli, ["status"], env={**env, "REDIS_URL": ""})
    assert result.exit_code == 3 and "no embedded store has run" in result.stderr
    assert not (tmp_path / "elsewhere").exists()


def test_versions_behind_a_kafka_log(
    env: dict[str, str], store: redis.Redis, kafka_bootstrap: str
) -> None:
    from demo.chirp import app as chirp
    from liveviews.log.kafka.append import KafkaEventLog
    from liveviews.log.kafka.lag import log_ends

    topic = f"status-{uuid.uuid4().hex[:8]}"
    log = KafkaEventLog(kafka_bootstrap, chirp, PARTITIONS, store, topic=topic)
    try:
        for i in range(12):
            log.append(profile(f"user{i}", "x"))
    finally:
        log.close()
    ends = log_ends(kafka_bootstrap, topic, PARTITIONS)
    versions.register(store, "entities", "v1")
    versions.begin(store, "entities", "v2", "v2")
    versions.switch(store, "entities", SHARDS)
    versions.begin(store, "entities", "v3", "v3")
    store.hset(FRONTIER_KEY, "entities@v2", orjson.dumps({str(p): str(n) for p, n in ends.items()}))
    busiest = max(ends, key=lambda p: ends[p])
    store.hset(FRONTIER_KEY, "entities@v3", orjson.dumps({str(busiest): str(ends[busiest] - 1)}))
    run = Run({**env, "LV_KAFKA": kafka_bootstrap, "LV_KAFKA_TOPIC": topic})
    doc = run.json("status")
    assert doc["log"]["events"] == 12
    assert doc["log"]["heads"] == {str(p): str(n) for p, n in ends.items() if n}
    active, building, _ = next(p for p in doc["pipelines"]
                               if p["pipeline"] == "entities")["versions"]  # fmt: skip
    assert active["lag"] == {"events": 0, "capped": False, "seconds": 0.0}
    assert building["lag"]["events"] == 12 - ends[busiest] + 1
    assert building["lag"]["seconds"] > 0
    text = run("status")
    assert text.exit_code == 0, text.stderr
    assert "behind 1 offsets" in text.stdout and "at head" in text.stdout
    assert doc["log"]["kafka"] == {"bootstrap": kafka_bootstrap, "topic": topic}
    assert f"log: Kafka topic {topic} at {kafka_bootstrap}" in text.stdout
    # What ``liveviews rebuild`` shows its progress against: the topic, not the store's streams.
    settings = Settings.from_env({**env, "LV_KAFKA": kafka_bootstrap, "LV_KAFKA_TOPIC": topic})
    assert log_size(store, settings) == 12
