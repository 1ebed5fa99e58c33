"""``liveviews rebuild | switch | abort``: each records its request, then waits for the registry
to change as the pipeline process changes it (simulated here by a thread, as it acts: within
a poll of the request)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import orjson
import pytest
import redis

from liveviews.cli import rebuild
from liveviews.pipeline import versions
from tests.cli.conftest import SHARDS, Pipelines, Run, profile

Act = Callable[[redis.Redis, str], None]


@contextmanager
def pipeline_process(store_url: str, pipeline: str, act: dict[str, Act]) -> Iterator[None]:
    """Takes each request for ``pipeline`` and does ``act[kind]`` with it, until the end."""
    stop = threading.Event()
    client = redis.Redis.from_url(store_url)

    def loop() -> None:
        while not stop.is_set():
            kind = versions.take_request(client, pipeline)
            if kind is not None and kind in act:
                act[kind](client, pipeline)
            time.sleep(0.05)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(5)
        client.close()


def build(events: int, then: str) -> Act:
    """A rebuild that reads ``events`` events in four batches, then switches or aborts."""

    def act(client: redis.Redis, p: str) -> None:
        versions.begin(client, p, "v2", "v2")
        for batch in range(4):
            time.sleep(0.1)
            client.xadd("lv:pipeline:progress", {
                "query": f"liveviews.{p}@v2", "batch": batch, "events": events // 4,
                "duration_ms": orjson.dumps({"triggerExecution": 100})})  # fmt: skip
            client.xadd("lv:pipeline:progress", {"query": f"liveviews.{p}", "batch": 99,
                                                 "events": 1000, "duration_ms": b"{}"})  # fmt: skip
        if then == "switch":
            versions.switch(client, p, SHARDS)
        else:
            versions.abort(client, p)

    return act


def switch_now(client: redis.Redis, p: str) -> None:
    versions.switch(client, p, SHARDS)


def abort_now(client: redis.Redis, p: str) -> None:
    versions.abort(client, p)


@pytest.fixture()
def serving(store: redis.Redis, pipelines: Pipelines) -> None:
    versions.register(store, "entities", "v1")
    pipelines.append(*[profile(f"user{i}", "x") for i in range(20)])


def test_rebuild_follows_the_new_version_until_it_serves_readers(
    run: Run, store: redis.Redis, store_url: str, serving: None
) -> None:
    with pipeline_process(store_url, "entities", {"rebuild": build(20, then="switch")}):
        doc = run.json("rebuild", "entities")
    assert doc["outcome"] == "switched" and doc["version"] == "v2"
    assert (doc["processed"], doc["size"]) == (20, 20)
    reg = versions.read(store, "entities")
    assert reg is not None and reg.active is not None and reg.active.version == "v2"


def test_rebuild_shows_progress_and_says_when_done(run: Run, store_url: str, serving: None) -> None:
    with pipeline_process(store_url, "entities", {"rebuild": build(20, then="switch")}):
        result = run("rebuild", "entities")
    assert result.exit_code == 0, result.stderr
    assert "20 / 20 events" in result.stderr and "events/s" in result.stderr
    assert "version v2 of 'entities' serves readers" in result.stdout


def test_an_aborted_rebuild_exits_1(run: Run, store_url: str, serving: None) -> None:
    with pipeline_process(store_url, "entities", {"rebuild": build(20, then="abort")}):
        doc = run.json("rebuild", "entities", code=1)
    assert doc["code"] == "aborted" and doc["version"] == "v2" and "v1" in doc["message"]


def test_rebuild_without_waiting_only_records_the_request(
    run: Run, store: redis.Redis, serving: None
) -> None:
    assert run.json("rebuild", "entities", "--no-wait") == {
        "pipeline": "entities", "asked": True, "version": None}  # fmt: skip
    reg = versions.read(store, "entities")
    assert reg is not None and reg.request is not None and reg.request["kind"] == "rebuild"


def test_a_request_nobody_takes_is_said_plainly(
    run: Run, serving: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(rebuild, "TAKE_SECONDS", 0.3)
    monkeypatch.setattr(rebuild, "POLL_SECONDS", 0.05)
    result = run("rebuild", "entities")
    assert result.exit_code == 1
    assert "has not taken the rebuild request" in result.stderr
    assert "Traceback" not in result.stderr


def test_switch_moves_readers_and_abort_drops_the_version(
    run: Run, store: redis.Redis, store_url: str, serving: None
) -> None:
    versions.begin(store, "entities", "v2", "v2")
    with pipeline_process(store_url, "entities", {"switch": switch_now}):
        assert run.json("switch", "entities") == {
            "pipeline": "entities", "active": "v2", "retired": "v1"}  # fmt: skip
    versions.begin(store, "entities", "v3", "v3")
    with pipeline_process(store_url, "entities", {"abort": abort_now}):
        result = run("abort", "entities")
    assert result.exit_code == 0, result.stderr
    assert "version v3 of 'entities' dropped; readers keep version v2" in result.stdout
    reg = versions.read(store, "entities")
    assert reg is not None and reg.next is None and reg.active and reg.active.version == "v2"


def test_switch_and_abort_without_a_version_being_built_or_in_time(
    run: Run, store: redis.Redis, serving: None
) -> None:
    for command in ("switch", "abort"):
        doc = run.json(command, "entities", code=1)
        assert doc["code"] == "refused" and "no version being built" in doc["message"]
    versions.begin(store, "entities", "v2", "v2")
    doc = run.json("switch", "entities", "--timeout", "0.3", code=1)
    assert doc["code"] == "timeout" and "--timeout" in doc["message"]


def test_an_unknown_pipeline_is_named_with_the_known_ones(run: Run, serving: None) -> None:
    for command in ("rebuild", "switch", "abort"):
        result = run(command, "nope")
        assert result.exit_code == 1
        assert (
            "there is no pipeline 'nope'; pipelines: activity, entities, profiles." in result.stderr
        )
