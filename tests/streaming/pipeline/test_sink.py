"""The change-topic sink, driven directly: idempotence, deltas, limits and the frontier."""

from __future__ import annotations

import orjson
import pytest

from liveviews.app import App
from liveviews.changes.topic import (
    VIEWS_FRONTIER,
    read_deltas,
    read_frontier,
    read_snapshot,
    shard_for,
)
from liveviews.errors import ConfigurationError
from liveviews.gateway.report import GATEWAYS_KEY
from liveviews.pipeline.sink import BUILD_CALL_OPS, ChangeTopicSink
from tests.support.sinkrows import make_app, row

SHARDS = 4


@pytest.fixture()
def sink(store):
    return ChangeTopicSink(store, make_app(), "q", SHARDS, retention=1000)


def deltas_of(store, view: str, key: str):
    return [d for d in read_deltas(store, shard_for(view, key, SHARDS)) if d.key == key]


def test_batch_applied_once_even_when_replayed(store, sink):
    batch = [
        row("plain", "k", "r1", '{"a":1}'),
        row("plain", "k", "r2", '{"b":2}'),
    ]
    sink.write(batch, 0, {0: "5-0"})
    sink.write(batch, 0, {0: "5-0"})  # replayed after a crash
    (delta,) = deltas_of(store, "plain", "k")
    assert delta.batch == 0
    assert delta.ops == [
        {"op": "upsert", "row": "r1", "value": {"a": 1}},
        {"op": "upsert", "row": "r2", "value": {"b": 2}},
    ]
    snap = read_snapshot(store, "plain", "k", SHARDS)
    assert snap.rows == {"r1": {"a": 1}, "r2": {"b": 2}}
    assert snap.position == delta.id == snap.last_change


def test_unchanged_rows_emit_no_delta_and_deletes_of_missing_rows_neither(store, sink):
    sink.write([row("plain", "k", "r1", '{"a":1}')], 0)
    sink.write([row("plain", "k", "r1", '{"a":1}'), row("plain", "k", "gone", None)], 1)
    assert len(deltas_of(store, "plain", "k")) == 1
    sink.write([row("plain", "k", "r1", None)], 2)
    last = deltas_of(store, "plain", "k")[-1]
    assert last.ops == [{"op": "delete", "row": "r1"}]
    assert read_snapshot(store, "plain", "k", SHARDS).rows == {}


def test_limited_view_serves_top_rows_and_brings_back_the_next(store, sink):
    sink.write([row("top", "k", f"r{i}", f'{{"i":{i}}}', float(i)) for i in range(5)], 0)
    assert sorted(read_snapshot(store, "top", "k", SHARDS).rows) == ["r2", "r3", "r4"]
    sink.write([row("top", "k", "r4", None)], 1)
    assert sorted(read_snapshot(store, "top", "k", SHARDS).rows) == ["r1", "r2", "r3"]
    last = deltas_of(store, "top", "k")[-1]
    assert sorted(op["op"] + ":" + op["row"] for op in last.ops) == ["delete:r4", "upsert:r1"]
    # A candidate below the top changes silently; it shows when it enters the top.
    sink.write([row("top", "k", "r0", '{"i":"new"}', 0.0)], 2)
    assert len(deltas_of(store, "top", "k")) == 2
    sink.write([row("top", "k", "r3", None), row("top", "k", "r2", None)], 3)
    assert read_snapshot(store, "top", "k", SHARDS).rows == {"r1": {"i": 1}, "r0": {"i": "new"}}


def test_rows_entering_the_top_push_out_the_lowest_and_a_score_drop_lets_one_in(store, sink):
    def ops_of_last() -> list[str]:
        return sorted(op["op"] + ":" + op["row"] for op in deltas_of(store, "top", "k")[-1].ops)

    sink.write([row("top", "k", f"r{i}", f'{{"i":{i}}}', float(i)) for i in range(4)], 0)
    assert sorted(read_snapshot(store, "top", "k", SHARDS).rows) == ["r1", "r2", "r3"]
    sink.write([row("top", "k", "a", '"a"', 10.0), row("top", "k", "b", '"b"', 11.0)], 1)
    assert sorted(read_snapshot(store, "top", "k", SHARDS).rows) == ["a", "b", "r3"]
    assert ops_of_last() == ["delete:r1", "delete:r2", "upsert:a", "upsert:b"]
    # A row of the top whose score drops below the others leaves; the next one comes back.
    sink.write([row("top", "k", "b", '"b"', -1.0)], 2)
    assert read_snapshot(store, "top", "k", SHARDS).rows == {
        "a": "a",
        "r3": {"i": 3},
        "r2": {"i": 2},
    }
    assert ops_of_last() == ["delete:b", "upsert:r2"]


def test_rows_rewritten_at_the_score_they_keep_change_only_what_readers_see(store, sink):
    """A rename rewrites tweets in every follower's timeline at the score they had: the top
    rows keep their order, a changed row of the top is sent, one below it only stored."""
    sink.write([row("top", "k", f"r{i}", f'{{"i":{i}}}', float(i)) for i in range(5)], 0)
    sink.write([row("top", "k", "r3", '"renamed"', 3.0), row("top", "k", "r0", '"low"', 0.0),
                row("top", "k", "r4", '{"i":4}', 4.0)], 1)  # fmt: skip
    assert deltas_of(store, "top", "k")[-1].ops == [
        {"op": "upsert", "row": "r3", "value": "renamed"}
    ]
    assert read_snapshot(store, "top", "k", SHARDS).rows == {
        "r2": {"i": 2}, "r3": "renamed", "r4": {"i": 4}
    }  # fmt: skip
    sink.write([row("top", "k", "r4", '{"i":4}', 4.0)], 2)  # the same value: no delta
    assert len(deltas_of(store, "top", "k")) == 2
    # The candidate rewritten below the top shows with its new value once it enters it.
    sink.write([row("top", "k", "r4", None), row("top", "k", "r3", None),
                row("top", "k", "r2", None)], 3)  # fmt: skip
    assert read_snapshot(store, "top", "k", SHARDS).rows == {"r1": {"i": 1}, "r0": "low"}


def test_equal_scores_rank_by_row_id(store, sink):
    sink.write([row("top", "k", r, "1", 7.0) for r in ("a", "d", "b", "c")], 0)
    assert sorted(read_snapshot(store, "top", "k", SHARDS).rows) == ["b", "c", "d"]


def test_a_row_changed_twice_in_a_batch_emits_each_change_and_stores_the_last(store, sink):
    sink.write([row("plain", "k", "r", '"old"')], 0)
    sink.write([row("plain", "k", "r", None), row("plain", "k", "r", '"new"'),
                row("plain", "k", "r", '"new"'), row("top", "k", "t", '"x"', 1.0),
                row("top", "k", "t", None)], 1)  # fmt: skip
    assert deltas_of(store, "plain", "k")[-1].ops == [
        {"op": "delete", "row": "r"},
        {"op": "upsert", "row": "r", "value": "new"},
    ]
    assert read_snapshot(store, "plain", "k", SHARDS).rows == {"r": "new"}
    assert deltas_of(store, "top", "k") == []  # in and out of the top within the batch
    assert read_snapshot(store, "top", "k", SHARDS).rows == {}


def test_a_key_with_more_rows_than_one_store_command_takes(store):
    # The script writes a key's rows in commands of at most a few thousand arguments each.
    app = App("t")
    app.view("plain")
    app.view("top", limit=2500)
    sink = ChangeTopicSink(store, app, "q", SHARDS, retention=1000)
    n = 6000
    sink.write([row("plain", "big", f"r{i}", str(i)) for i in range(n)], 0)
    sink.write([row("top", "big", f"r{i}", str(i), float(i)) for i in range(n)], 0)
    assert read_snapshot(store, "plain", "big", SHARDS).rows == {f"r{i}": i for i in range(n)}
    top = {f"r{i}": i for i in range(n - 2500, n)}
    assert read_snapshot(store, "top", "big", SHARDS).rows == top
    (delta,) = deltas_of(store, "top", "big")
    assert len(delta.ops) == 2500
    sink.write([row("plain", "big", f"r{i}", None) for i in range(n)], 1)
    sink.write([row("top", "big", f"r{i}", None) for i in range(n - 3000, n)], 1)
    assert read_snapshot(store, "plain", "big", SHARDS).rows == {}
    assert read_snapshot(store, "top", "big", SHARDS).rows == {
        f"r{i}": i for i in range(n - 5500, n - 3000)
    }


def test_frontier_advances_per_partition_and_never_back(store, sink):
    sink.write([], 0, {0: "10-0", 1: "3-1"})
    sink.write([], 1, {0: "9-5"})  # cannot happen, but must not move the frontier back
    sink.write([], 2, {1: "12-0"})
    sink.write([], 2, {1: "99-0"})  # replay of batch 2 with other content: ignored
    assert read_frontier(store, "q") == {0: "10-0", 1: "12-0"}
    assert read_frontier(store, VIEWS_FRONTIER) == {0: "10-0", 1: "12-0"}
    # Progress records each advance of the pipeline's frontier and of the views' frontier: in
    # a one-pipeline application, two entries per advance; batch 1 moved nothing.
    entries = store.xrange("lv:{m}:progress")
    assert [(e[1][b"pipeline"], e[1][b"batch"]) for e in entries] == [
        (b"q", b"0"), (VIEWS_FRONTIER.encode(), b"0"), (b"q", b"2"), (VIEWS_FRONTIER.encode(), b"2"),
    ]  # fmt: skip
    assert orjson.loads(entries[-2][1][b"frontier"]) == {"0": "10-0", "1": "12-0"}


def test_views_frontier_is_the_oldest_pipelines(store):
    """Each pipeline advances its own frontier; views reflect the oldest, per partition."""
    names = ["fast", "slow"]
    app = make_app()
    fast = ChangeTopicSink(store, app, "fast", SHARDS, 100, names)
    slow = ChangeTopicSink(store, app, "slow", SHARDS, 100, names)
    fast.write([], 0, {0: "10-0", 1: "4-0"})
    assert read_frontier(store, VIEWS_FRONTIER) == {}  # "slow" has read nothing yet
    # The views of "fast" need not wait for "slow": its own frontier is in the progress stream.
    assert [e[1][b"pipeline"] for e in store.xrange("lv:{m}:progress")] == [b"fast"]
    slow.write([], 0, {0: "7-0"})
    assert read_frontier(store, VIEWS_FRONTIER) == {0: "7-0"}
    slow.write([], 1, {0: "12-0", 1: "5-0"})
    assert read_frontier(store, VIEWS_FRONTIER) == {0: "10-0", 1: "4-0"}
    fast.write([], 1, {1: "6-0"})
    assert read_frontier(store, VIEWS_FRONTIER) == {0: "10-0", 1: "5-0"}
    assert read_frontier(store, "fast") == {0: "10-0", 1: "6-0"}
    fast.write([], 1, {0: "1-0"})  # a replayed batch: ignored
    entries = store.xrange("lv:{m}:progress")
    combined = VIEWS_FRONTIER.encode()
    assert [e[1][b"pipeline"] for e in entries] == [
        b"fast", b"slow", combined, b"slow", combined, b"fast", combined,
    ]  # fmt: skip
    assert orjson.loads(entries[-2][1][b"frontier"]) == {"0": "10-0", "1": "6-0"}


def test_a_pipeline_writing_an_undeclared_view_fails_loudly(store, sink):
    with pytest.raises(ConfigurationError, match="undeclared view 'nope'"):
        sink.write([row("nope", "k", "r", "1")], 0)
    # The session's gateways keep their report in the store; nothing else may be there.
    assert set(store.scan_iter()) <= {GATEWAYS_KEY.encode()}


def test_retention_trims_the_change_topic(store):
    sink = ChangeTopicSink(store, make_app(), "q", 1, retention=10)
    for b in range(300):
        sink.write([row("plain", f"k{b}", "r", str(b))], b)
    assert store.xlen("lv:{c0}:changes") < 300


def test_a_batch_cut_short_between_calls_emits_nothing_twice(store):
    """Crash after a shard's change calls but before its final call recorded the batch id."""
    sink = ChangeTopicSink(store, make_app(), "q", 1, retention=1000, call_ops=2)
    batch = [row("plain", f"k{i}", "r", str(i)) for i in range(7)]
    batch += [row("top", "t", f"r{i}", str(i), float(i)) for i in range(5)]
    sink.write(batch, 0)
    first = read_deltas(store, 0)
    assert len(first) == 8
    store.hdel("lv:{c0}:batches", "q")  # as if the final call never ran
    sink.write(batch, 0)
    assert read_deltas(store, 0) == first
    assert store.hget("lv:{c0}:batches", "q") == b"0"


def test_the_lag_is_measured_against_the_log_heads_read_before_the_frontier(store, sink):
    store.xadd("lv:log:0", {"a": "1"}, id="1000-0")
    store.xadd("lv:log:0", {"a": "1"}, id="4000-0")
    sink.write([], 0, {0: "1000-0"})
    assert store.hget("lv:{m}:frontier:lag", "q") == b"3000"
    sink.write([], 1, {0: "4000-0"})
    assert store.hget("lv:{m}:frontier:lag", "q") == b"0"


def test_a_log_whose_positions_hold_no_time_records_no_lag(store):
    """On Kafka a frontier's position says nothing of when its event came: a frame then
    carries no lag rather than a 0 that would say the views are caught up."""
    store.xadd("lv:log:0", {"a": "1"}, id="4000-0")  # no reader of a Kafka log looks here
    sink = ChangeTopicSink(store, make_app(), "q", SHARDS, retention=1000, log_in_store=False)
    store.hset("lv:{m}:frontier:lag", "q", 250)  # as the store's log left it
    sink.write([], 0, {0: "17"})
    assert store.hget("lv:{m}:frontier:lag", "q") is None
    progress = [f for _, f in store.xrange("lv:{m}:progress") if f[b"pipeline"] == b"q"]
    assert progress and all(b"lag_ms" not in f for f in progress)
    assert read_frontier(store, "q") == {0: "17"}


def test_a_version_being_built_writes_in_short_store_calls(store):
    """The store runs one call at a time: a rebuild's long calls made every reader wait."""
    batch = [row("plain", f"k{i}", "r", str(i)) for i in range(2 * BUILD_CALL_OPS + 1)]
    batch += [row("plain", "big", f"r{i}", str(i)) for i in range(BUILD_CALL_OPS + 7)]

    def calls(sink: ChangeTopicSink, batch_id: int) -> int:
        before = store.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0)
        sink.write(batch, batch_id)
        return store.info("commandstats")["cmdstat_evalsha"]["calls"] - before

    serving = ChangeTopicSink(store, make_app(), "q", 1, retention=10_000)
    building = ChangeTopicSink(store, make_app(), "q", 1, 10_000, namespace="@v2",
                               call_ops=BUILD_CALL_OPS)  # fmt: skip
    # Every change in one call, then the call recording the batch and the frontier's.
    assert calls(serving, 0) == 1 + 2
    # A key's changes stay in one call (they are one delta), even above the bound.
    assert calls(building, 0) == 4 + 2
    assert (
        read_snapshot(store, "plain", "big", 1, "@v2").rows
        == read_snapshot(store, "plain", "big", 1).rows
    )
