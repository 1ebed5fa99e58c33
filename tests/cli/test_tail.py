"""``liveviews tail``: the log's events as they are appended, across partitions, filtered."""

from __future__ import annotations

import threading
import time
import uuid

import orjson
import redis

from demo.chirp import app as chirp
from liveviews.log.events import log_stream
from liveviews.log.kafka.append import KafkaEventLog
from tests.cli.conftest import PARTITIONS, Pipelines, Run, profile


def test_from_the_start_with_filters(run: Run, store: redis.Redis, pipelines: Pipelines) -> None:
    offsets = pipelines.append(
        profile("alice", "A"), profile("bob", "B"),
        {"type": "tweet_posted", "payload": {"user": "alice", "tweet": "alice:1", "text": "hi"}},
    )  # fmt: skip
    result = run("tail", "--from-start", "--limit", "3", "--json")
    assert result.exit_code == 0, result.stderr
    events = [orjson.loads(line) for line in result.stdout.splitlines()]
    assert sorted(e["offset"] for e in events) == sorted(str(o) for o in offsets)
    assert {e["type"] for e in events} == {"profile_set", "tweet_posted"}
    assert events[0]["payload"]["user"] in ("alice", "bob") and isinstance(events[0]["time"], int)
    only = run("tail", "--from-start", "--limit", "1", "--type", "tweet_posted", "--json")
    assert orjson.loads(only.stdout)["payload"]["tweet"] == "alice:1"
    keyed = run("tail", "--from-start", "--limit", "1", "--key", "bob", "--type", "profile_set")
    assert keyed.stdout.split()[1:3] == ["profile_set", "bob"]


def test_events_appended_while_it_runs_and_entries_that_are_not_events(
    run: Run, store: redis.Redis, pipelines: Pipelines
) -> None:
    pipelines.append(profile("old", "before"))

    def later() -> None:
        time.sleep(0.3)
        pipelines.append(profile("carol", "C"))
        store.xadd(log_stream(1), {"type": "profile_set", "junk": "x"})

    writer = threading.Thread(target=later)
    writer.start()
    result = run("tail", "--limit", "2", "--json")
    writer.join()
    assert result.exit_code == 0, result.stderr
    first, second = (orjson.loads(line) for line in result.stdout.splitlines())
    assert first["key"] == "carol"  # the event from before the start is not shown
    assert second["raw"] == {"type": "profile_set", "junk": "x"} and second["payload"] is None


def test_a_kafka_log_from_the_start_and_as_it_is_appended(
    env: dict[str, str], store: redis.Redis, kafka_bootstrap: str
) -> None:
    topic = f"log-{uuid.uuid4().hex[:8]}"
    run = Run({**env, "LV_KAFKA": kafka_bootstrap, "LV_KAFKA_TOPIC": topic})
    log = KafkaEventLog(kafka_bootstrap, chirp, PARTITIONS, store, topic=topic)
    try:
        offsets = log.append_batch([profile("alice", "A"), profile("bob", "B")])
        result = run("tail", "--from-start", "--limit", "2", "--json")
        assert result.exit_code == 0, result.stderr
        events = [orjson.loads(line) for line in result.stdout.splitlines()]
        assert sorted(e["offset"] for e in events) == sorted(str(o) for o in offsets)
        assert {e["payload"]["name"] for e in events} == {"A", "B"}

        def later() -> None:
            time.sleep(0.5)
            log.append(profile("carol", "C"))

        writer = threading.Thread(target=later)
        writer.start()
        result = run("tail", "--limit", "1")
        writer.join()
        assert result.exit_code == 0, result.stderr
        assert result.stdout.split()[1:3] == ["profile_set", "carol"]  # not the older events
    finally:
        log.close()
