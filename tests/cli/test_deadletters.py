"""``liveviews deadletters``: list, show and replay, in tables or JSON; the one command line of
the dead letters."""

from __future__ import annotations

import uuid
from typing import Any

import redis

from demo.chirp import app as chirp
from liveviews.log import deadletters
from liveviews.log.events import log_stream
from liveviews.log.kafka import entries
from liveviews.log.kafka.append import KafkaEventLog
from tests.cli.conftest import PARTITIONS, Pipelines, Run, profile


def _letters(store: redis.Redis, pipelines: Pipelines) -> list[str]:
    offsets = [str(o) for o in pipelines.append(profile("alice", "A"), profile("bob", "B"))]
    entries: Any = store.xrange(log_stream(int(offsets[0].split(":")[0])), count=1)
    fields = entries[0][1]
    deadletters.record(store, [
        deadletters.letter("entities", offsets[0], deadletters.STAGE_VIEW, "boom", fields=fields),
        deadletters.letter("activity", offsets[1], deadletters.STAGE_DECODE, "bad payload"),
    ])  # fmt: skip
    return offsets


def test_list_show_and_replay(run: Run, store: redis.Redis, pipelines: Pipelines) -> None:
    offsets = _letters(store, pipelines)
    listed = run.json("deadletters", "list")
    assert [(d["pipeline"], d["offset"]) for d in listed] == [
        ("entities", offsets[0]), ("activity", offsets[1])]  # fmt: skip
    assert [d["offset"] for d in run.json("deadletters", "list", "--pipeline", "activity")] == [
        offsets[1]
    ]
    assert len(run.json("deadletters", "list", "--count", "1")) == 1
    shown = run.json("deadletters", "show", "entities", offsets[0])
    assert shown["error"] == "boom" and shown["event"]["type"] == "profile_set"
    table = run("deadletters", "list")
    assert table.exit_code == 0 and "bad payload" in table.stdout and offsets[1] in table.stdout
    detail = run("deadletters", "show", "entities", offsets[0])
    assert detail.exit_code == 0 and '"type": "profile_set"' in detail.stdout
    replayed = run.json("deadletters", "replay", "entities", offsets[0])
    assert replayed["replayed"] == offsets[0]
    partition, _, new_id = replayed["as"].partition(":")
    assert store.xrange(log_stream(int(partition)), new_id, new_id)
    after = deadletters.show(store, "entities", offsets[0])
    assert after is not None and after.replayed_as == replayed["as"]


def test_what_does_not_exist_exits_1(run: Run, store: redis.Redis, pipelines: Pipelines) -> None:
    offsets = _letters(store, pipelines)
    for command in ("show", "replay"):
        doc = run.json("deadletters", command, "entities", "0:1-1", code=1)
        assert doc["code"] == "not_found" and "no dead letter at 0:1-1" in doc["message"]
    partition, _, entry = offsets[1].partition(":")
    store.xdel(log_stream(int(partition)), entry)
    gone = run("deadletters", "replay", "activity", offsets[1])
    assert gone.exit_code == 1 and "no longer holds" in gone.stderr


def test_replay_on_a_kafka_log_appends_the_record_again(
    env: dict[str, str], store: redis.Redis, kafka_bootstrap: str
) -> None:
    topic = f"log-{uuid.uuid4().hex[:8]}"
    log = KafkaEventLog(kafka_bootstrap, chirp, PARTITIONS, store, topic=topic)
    try:
        (offset,) = log.append_batch([profile("alice", "A")])
    finally:
        log.close()
    fields = entries.read_entry(kafka_bootstrap, topic, offset.partition, offset.id)
    assert fields is not None and fields[b"type"] == b"profile_set"
    gone = f"{offset.partition}:{int(offset.id) + 1000}"
    deadletters.record(store, [
        deadletters.letter("entities", str(offset), deadletters.STAGE_VIEW, "boom", fields=fields),
        deadletters.letter("entities", gone, deadletters.STAGE_DECODE, "bad"),
    ])  # fmt: skip
    run = Run({**env, "LV_KAFKA": kafka_bootstrap, "LV_KAFKA_TOPIC": topic})
    replayed = run.json("deadletters", "replay", "entities", str(offset))
    partition, _, position = replayed["as"].partition(":")
    assert int(partition) == offset.partition and int(position) > int(offset.id)
    assert entries.read_entry(kafka_bootstrap, topic, offset.partition, position) == fields
    after = deadletters.show(store, "entities", str(offset))
    assert after is not None and after.replayed_as == replayed["as"]
    missing = run("deadletters", "replay", "entities", gone)
    assert missing.exit_code == 1 and "no longer holds" in missing.stderr
