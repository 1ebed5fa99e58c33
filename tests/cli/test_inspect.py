"""``liveviews inspect``: a key's rows, position and last deltas, and its rows as of an offset,
replayed from the change topic, or the plain answer that history that old is gone."""

from __future__ import annotations

from typing import Any

import redis

from liveviews.changes.topic import changes_stream, history_stream, read_snapshot, shard_for
from liveviews.pipeline import versions
from tests.cli.conftest import SHARDS, Pipelines, Run, profile


def _history(store: redis.Redis, pipelines: Pipelines, user: str = "alice") -> list[Any]:
    """Five batches of ``profiles``, each reading one more profile event of ``user``; another
    user's deltas in between. The offsets, and ``user``'s rows after each batch."""
    versions.register(store, "profiles", "v1")
    out = []
    for i in range(5):
        (offset,) = pipelines.append(profile(user, f"name {i}"))
        changes: list[tuple[str, str, str, Any]] = [
                   ("profiles", user, "profile", {"name": f"name {i}"}),
                   ("profiles", "zed", "profile", {"name": f"zed {i}"})]  # fmt: skip
        if i == 1:
            changes.append(("profiles", user, "badge", {"kind": "early"}))
        if i == 3:
            changes.append(("profiles", user, "badge", None))
        pipelines.batch(changes, {offset.partition: offset.id})
        out.append((str(offset), read_snapshot(store, "profiles", user, SHARDS).rows))
    return out


def test_rows_position_and_last_deltas_newest_first(
    run: Run, store: redis.Redis, pipelines: Pipelines
) -> None:
    _history(store, pipelines)
    doc = run.json("inspect", "profiles", "alice", "--deltas", "2")
    assert doc["rows"] == {"profile": {"name": "name 4"}}
    assert (doc["pipeline"], doc["version"]) == ("profiles", "v1")
    shard = shard_for("profiles", "alice", SHARDS)
    newest: Any = store.xrevrange(changes_stream(shard), count=1)
    head = newest[0][0].decode()
    assert doc["position"]["shard"] == shard and doc["position"]["head"] == head
    assert [d["batch"] for d in doc["deltas"]] == [4, 3]
    assert doc["position"]["last_change"] == doc["deltas"][0]["id"]
    assert sorted(doc["deltas"][1]["ops"], key=lambda op: op["row"]) == [
        {"op": "delete", "row": "badge"},
        {"op": "upsert", "row": "profile", "value": {"name": "name 3"}},
    ]
    text = run("inspect", "profiles", "alice")
    assert text.exit_code == 0 and "name 4" in text.stdout and head in text.stdout


def test_rows_as_of_each_offset_are_the_rows_after_the_batch_that_first_reflected_it(
    run: Run, store: redis.Redis, pipelines: Pipelines
) -> None:
    for batch, (offset, rows) in enumerate(_history(store, pipelines)):
        doc = run.json("inspect", "profiles", "alice", "--as-of", offset)
        assert doc["rows"] == rows, batch
        assert doc["as_of"]["offset"] == offset and doc["as_of"]["batch"] == batch
        assert [d["batch"] for d in doc["deltas"]] == list(range(batch, -1, -1))[:10]
    text = run("inspect", "profiles", "alice", "--as-of", offset)
    assert text.exit_code == 0 and "as of" in text.stdout and "name 4" in text.stdout


def test_an_offset_between_batches_reads_the_later_batch(
    run: Run, store: redis.Redis, pipelines: Pipelines
) -> None:
    versions.register(store, "profiles", "v1")
    first, second = pipelines.append(profile("alice", "one"), profile("alice", "two"))
    pipelines.batch([("profiles", "alice", "profile", {"name": "one"})], {0: "0-1"} |
                    {first.partition: first.id})  # fmt: skip
    pipelines.batch([("profiles", "alice", "profile", {"name": "two"})],
                    {second.partition: second.id})  # fmt: skip
    doc = run.json("inspect", "profiles", "alice", "--as-of", str(second))
    assert doc["rows"] == {"profile": {"name": "two"}} and doc["as_of"]["batch"] == 1


def test_a_limited_view_replays_to_its_served_rows(
    run: Run, store: redis.Redis, pipelines: Pipelines
) -> None:
    versions.register(store, "activity", "a1")
    seen = []
    batches: list[list[tuple[str, str, str, Any]]] = [
        [("activity", "global", f"m{n:02}", {"n": n, "score": n}) for n in range(62)],
        [("activity", "global", f"m{n:02}", None) for n in (61, 60, 59)],
        [("activity", "global", "m00", {"n": "new"})],
    ]
    for i, changes in enumerate(batches):
        (offset,) = pipelines.append(profile(f"u{i}", "x"))
        pipelines.batch(changes, {offset.partition: offset.id}, pipeline="activity")
        seen.append((str(offset), read_snapshot(store, "activity", "global", SHARDS).rows))
    for token, rows in seen:
        assert run.json("inspect", "activity", "global", "--as-of", token)["rows"] == rows


def test_history_trimmed_before_the_first_batch_that_covered_the_offset_is_gone(
    run: Run, store: redis.Redis, pipelines: Pipelines
) -> None:
    offsets = [o for o, _ in _history(store, pipelines)]
    store.xtrim(history_stream("profiles"), maxlen=2, approximate=False)
    for offset in offsets[:4]:
        doc = run.json("inspect", "profiles", "alice", "--as-of", offset, code=1)
        assert doc["code"] == "history_gone", doc
    assert run.json("inspect", "profiles", "alice", "--as-of", offsets[4])["as_of"]["batch"] == 4
    result = run("inspect", "profiles", "alice", "--as-of", offsets[0])
    assert result.exit_code == 1 and "history that old is gone" in result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""


def test_a_trimmed_change_topic_shard_is_history_gone(
    run: Run, store: redis.Redis, pipelines: Pipelines
) -> None:
    offsets = [o for o, _ in _history(store, pipelines)]
    store.xtrim(changes_stream(shard_for("profiles", "alice", SHARDS)), maxlen=1,
                approximate=False)  # fmt: skip
    doc = run.json("inspect", "profiles", "alice", "--as-of", offsets[-1], code=1)
    assert doc["code"] == "history_gone" and "LV_CHANGE_RETENTION" in doc["message"]


def test_a_rebuilt_version_has_no_deltas_before_its_switch_so_its_past_is_gone(
    run: Run, store: redis.Redis, pipelines: Pipelines
) -> None:
    _history(store, pipelines)
    versions.begin(store, "profiles", "v2", "v2")
    (offset,) = pipelines.append(profile("alice", "rebuilt"))
    pipelines.batch([("profiles", "alice", "profile", {"name": "rebuilt"})],
                    {offset.partition: offset.id}, namespace="@v2")  # fmt: skip
    versions.switch(store, "profiles", SHARDS)
    (later,) = pipelines.append(profile("alice", "after"))
    pipelines.batch([("profiles", "alice", "profile", {"name": "after"})],
                    {later.partition: later.id}, namespace="@v2")  # fmt: skip
    now = run.json("inspect", "profiles", "alice")
    assert now["version"] == "v2" and now["rows"] == {"profile": {"name": "after"}}
    assert [d["batch"] for d in now["deltas"]] == [1]
    for asked in (offset, later):
        doc = run.json("inspect", "profiles", "alice", "--as-of", str(asked), code=1)
        assert doc["code"] == "history_gone" and "rebuilt" in doc["message"], doc


def test_unknown_views_unreflected_and_malformed_offsets(
    run: Run, store: redis.Redis, pipelines: Pipelines
) -> None:
    offsets = [o for o, _ in _history(store, pipelines)]
    missing = run.json("inspect", "nope", "alice", code=1)
    assert missing["code"] == "unknown_view" and "profiles" in missing["message"]
    (unread,) = pipelines.append(profile("alice", "not yet"))
    assert run.json("inspect", "profiles", "alice", "--as-of", str(unread),
                    code=1)["code"] == "not_reflected"  # fmt: skip
    for bad in ("nonsense", "9:1-0", "0:x"):
        result = run("inspect", "profiles", "alice", "--as-of", bad)
        assert result.exit_code == 2, (bad, result.stdout, result.stderr)
        assert "Traceback" not in result.stderr
    assert offsets


def test_offsets_with_ids_ahead_of_the_store_clock_are_still_found(
    run: Run, store: redis.Redis, pipelines: Pipelines
) -> None:
    """Frontiers written with explicit ids (another clock, a test) make the time shortcut miss:
    the whole history is read instead."""
    versions.register(store, "profiles", "v1")
    ahead = 9_000_000_000_000
    for i in range(3):
        pipelines.batch([("profiles", "bob", "profile", {"name": f"b{i}"})],
                        {1: f"{ahead + i}-0"})  # fmt: skip
    doc = run.json("inspect", "profiles", "bob", "--as-of", f"1:{ahead + 1}-0")
    assert doc["as_of"]["batch"] == 1 and doc["rows"] == {"profile": {"name": "b1"}}
