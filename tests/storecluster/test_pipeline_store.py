"""The pipeline's writes and reads of the store on a store cluster, without Spark: the sink's
batch over every node, the three-step switch, the deletion of a replaced version, the
source's reads and the command line's status."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import orjson
import pytest
from click.testing import CliRunner
from redis.cluster import RedisCluster

from demo.chirp import app as chirp
from liveviews.cdc.capture import run
from liveviews.cdc.settings import CdcSettings
from liveviews.changes import lag
from liveviews.changes.topic import (
    ACTIVE_KEY,
    FRONTIER_KEY,
    VIEWS_FRONTIER,
    changes_stream,
    live_key,
    read_deltas,
    read_frontier,
    read_snapshot,
    shard_for,
)
from liveviews.cli import cli
from liveviews.errors import ConfigurationError
from liveviews.log.events import log_stream, partition_for
from liveviews.pipeline import versions
from liveviews.pipeline.retired import delete_state
from liveviews.pipeline.settings import Settings
from liveviews.pipeline.sink import ChangeTopicSink
from liveviews.pipeline.source import LogPrefetchReader, screen_option
from liveviews.pipeline.views import DEAD_LETTER_VIEW
from liveviews.store.client import node_client
from tests.cdc.shop import app as shop
from tests.support.sinkrows import make_app, row

SHARDS = 8


def nodes_of_shards(client: RedisCluster, shards: list[int]) -> set[str]:
    return {client.get_node_from_key(changes_stream(s)).name for s in shards}


def deltas_of(client: RedisCluster, view: str, key: str, namespace: str = "") -> list[Any]:
    shard = shard_for(view, key, SHARDS)
    return [d for d in read_deltas(client, shard) if d.key == key and d.namespace == namespace]


def test_a_batch_over_every_node_is_applied_once_and_acknowledged(
    cluster_store: RedisCluster,
) -> None:
    keys = [f"k{i}" for i in range(40)]
    shards = sorted({shard_for("plain", k, SHARDS) for k in keys})
    assert len(nodes_of_shards(cluster_store, shards)) == 3  # the batch spans every primary
    cluster_store.xadd(log_stream(0), {"a": "1"}, id="1000-0")
    cluster_store.xadd(log_stream(1), {"a": "1"}, id="5000-0")
    sink = ChangeTopicSink(cluster_store, make_app(), "q", SHARDS, 1000, ack_replicas=1)
    batch = [row("plain", k, "r", orjson.dumps({"k": k}).decode()) for k in keys]
    batch.append(row(DEAD_LETTER_VIEW, "0:1000-0", "map", '{"error": "E", "traceback": "T"}'))
    sink.write(batch, 0, {0: "1000-0", 1: "2000-0"})
    sink.write(batch, 0, {0: "1000-0", 1: "2000-0"})  # replayed after a crash
    for k in keys:
        (delta,) = deltas_of(cluster_store, "plain", k)
        assert delta.ops == [{"op": "upsert", "row": "r", "value": {"k": k}}]
        assert read_snapshot(cluster_store, "plain", k, SHARDS).rows == {"r": {"k": k}}
    assert read_frontier(cluster_store, "q") == {0: "1000-0", 1: "2000-0"}
    assert read_frontier(cluster_store, VIEWS_FRONTIER) == {0: "1000-0", 1: "2000-0"}
    # The lag comes from the log's heads, read by the sink: partition 1 is 3 s behind.
    assert cluster_store.hget("lv:{m}:frontier:lag", "q") == b"3000"
    assert cluster_store.hlen("lv:{d}:deadletters:q") == 1


def _building(client: RedisCluster) -> None:
    versions.register(client, "notes", "aaa", b"{}")
    versions.begin(client, "notes", "bbb", "bbb", b"{}")
    client.hset(FRONTIER_KEY, "notes@bbb", '{"0": "5-0"}')


def _publishers(client: RedisCluster, namespace: str) -> bool:
    """Does every shard publish the deltas that ``namespace``'s version writes?"""
    app = make_app()
    sink = ChangeTopicSink(client, app, "notes", SHARDS, 1000, namespace=namespace)
    keys = [f"p{i}" for i in range(30)]
    batch = int(client.incr("test:batch"))
    sink.write([row("plain", k, "r", str(batch)) for k in keys], batch, {})
    return all(deltas_of(client, "plain", k, namespace)[-1:] for k in keys) and all(
        deltas_of(client, "plain", k, namespace)[-1].batch == batch for k in keys
    )


def test_a_switch_moves_readers_and_every_shard(cluster_store: RedisCluster) -> None:
    _building(cluster_store)
    reg = versions.switch(cluster_store, "notes", SHARDS)
    assert reg.active is not None and reg.active.version == "bbb" and reg.next is None
    assert cluster_store.hget(ACTIVE_KEY, "notes") == b"@bbb"
    for s in range(SHARDS):
        assert cluster_store.hgetall(live_key(s)) == {b"notes": b"@bbb"}
    assert read_frontier(cluster_store, VIEWS_FRONTIER) == {0: "5-0"}


def test_a_switch_cut_short_between_its_steps_completes_when_asked_again(
    cluster_store: RedisCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    _building(cluster_store)

    def cut(*_: Any, **__: Any) -> None:
        raise ConnectionError("the process died between the shards and the control keys")

    with monkeypatch.context() as m:
        m.setattr(cluster_store, "transaction", cut)
        with pytest.raises(ConnectionError):
            versions.switch(cluster_store, "notes", SHARDS)
    # Readers still have the serving version, whose deltas are still published; the new
    # version's are published too, for the snapshot readers take once they move.
    assert cluster_store.hget(ACTIVE_KEY, "notes") in (None, b"")
    assert _publishers(cluster_store, "")
    assert _publishers(cluster_store, "@bbb")
    reg = versions.switch(cluster_store, "notes", SHARDS)
    assert reg.active is not None and reg.active.version == "bbb"
    assert cluster_store.hget(ACTIVE_KEY, "notes") == b"@bbb"
    for s in range(SHARDS):
        assert cluster_store.hgetall(live_key(s)) == {b"notes": b"@bbb"}
    assert _publishers(cluster_store, "@bbb")
    assert not _publishers(cluster_store, "")


def test_an_abort_after_a_switch_cut_short_puts_the_shards_back(
    cluster_store: RedisCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    _building(cluster_store)
    with monkeypatch.context() as m:
        m.setattr(cluster_store, "transaction", lambda *a, **k: (_ for _ in ()).throw(OSError()))
        with pytest.raises(OSError):
            versions.switch(cluster_store, "notes", SHARDS)
    dropped = versions.abort(cluster_store, "notes", SHARDS)
    assert dropped is not None and dropped.version == "bbb"
    for s in range(SHARDS):
        assert cluster_store.hgetall(live_key(s)) == {b"notes": b""}
    assert _publishers(cluster_store, "")
    assert not _publishers(cluster_store, "@bbb")


def test_deleting_a_replaced_version_finds_its_keys_on_every_primary(
    cluster_store: RedisCluster, tmp_path: Path
) -> None:
    app = make_app()
    keys = [f"k{i}" for i in range(60)]
    for namespace in ("", "@old"):
        sink = ChangeTopicSink(cluster_store, app, "q", SHARDS, 1000, namespace=namespace)
        sink.write([row("plain", k, "r", "1") for k in keys], 0, {0: "1-0"})
        sink.write([row("top", k, f"r{i}", "1", i) for k in keys for i in range(5)], 1, {})
    settings = Settings.from_env({"LV_DATA_DIR": str(tmp_path), "LV_CHANGE_SHARDS": str(SHARDS)})
    old = versions.Version("old", "@old", 0.0)
    delete_state(cluster_store, settings, "q", old, {"plain", "top"})
    left = [k.decode() for k in cluster_store.scan_iter(match="lv:{c*}:*@old*")]
    assert left == []
    assert read_frontier(cluster_store, "q@old") == {}
    assert all(read_snapshot(cluster_store, "plain", k, SHARDS).rows == {"r": 1} for k in keys)
    assert len(read_snapshot(cluster_store, "top", "k1", SHARDS).rows) == 3


def test_the_source_and_the_lag_read_every_partition(
    cluster_store: RedisCluster, cluster_url: str
) -> None:
    partitions = 4
    assert len({cluster_store.get_node_from_key(log_stream(p)).name for p in range(4)}) > 1
    ids = {p: [cluster_store.xadd(log_stream(p), {
        "type": b"t", "key": f"k{p}".encode(), "time": b"1", "payload": b"{}"})
        for _ in range(3)] for p in range(partitions)}  # fmt: skip
    reader = LogPrefetchReader(cluster_url, partitions, 100, ("", ""))
    batches, end = reader.read(reader.initialOffset())
    assert end == {str(p): ids[p][-1].decode() for p in range(partitions)}
    assert sum(b.num_rows for b in batches) == 12
    measured = lag.measure(cluster_store, partitions, {0: ids[0][0].decode()})
    assert measured.events == 2 + 3 * 3


def test_status_and_tail_on_a_cluster(
    cluster_store: RedisCluster, cluster_url: str, tmp_path: Path
) -> None:
    env = {"REDIS_URL": cluster_url, "LV_DATA_DIR": str(tmp_path),
           "LV_APP": "demo.chirp:app"}  # fmt: skip
    out = CliRunner().invoke(cli, ["status"], env=env)
    assert out.exit_code == 0, out.output
    assert "store: cluster of 3 primaries" in out.output
    doc = orjson.loads(CliRunner().invoke(cli, ["status", "--json"], env=env).output)
    assert doc["store"] == {"cluster": True, "primaries": 3}
    for p in range(4):
        cluster_store.xadd(log_stream(p), {"type": "like", "key": f"t{p}", "time": "1",
                                            "payload": '{"user": "u", "tweet": "t"}'})  # fmt: skip
    out = CliRunner().invoke(cli, ["tail", "--from-start", "--limit", "4", "--json"], env=env)
    assert out.exit_code == 0, out.output
    assert sorted(orjson.loads(line)["key"] for line in out.output.splitlines()) == [
        "t0",
        "t1",
        "t2",
        "t3",
    ]


def test_change_data_capture_refuses_a_store_cluster(cluster_url: str, tmp_path: Path) -> None:
    settings = CdcSettings.from_env({
        "REDIS_URL": cluster_url, "LV_DATA_DIR": str(tmp_path),
        "DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none",
    })  # fmt: skip
    with pytest.raises(ConfigurationError, match="needs a single store server"):
        run(settings, shop, threading.Event())


def test_inspect_and_dead_letters_on_a_cluster(
    cluster_store: RedisCluster, cluster_url: str, tmp_path: Path
) -> None:
    """A key as of a log offset (the batches' history on {m}, the deltas on the key's shard)
    and the dead letters ({d}), read from a cluster by the command line."""
    env = {"REDIS_URL": cluster_url, "LV_DATA_DIR": str(tmp_path), "LV_APP": "demo.chirp:app",
           "LV_CHANGE_SHARDS": str(SHARDS)}  # fmt: skip
    versions.register(cluster_store, "profiles", "v1")
    sink = ChangeTopicSink(cluster_store, chirp, "profiles", SHARDS, 1000)
    for batch, name in enumerate(["one", "two"]):
        offset = cluster_store.xadd(log_stream(0), {"a": "1"}).decode()
        value = orjson.dumps({"user": "alice", "name": name}).decode()
        sink.write([row("profiles", "alice", "profile", value)], batch, {0: offset})
        if batch == 0:
            first = offset
    sink.write([row(DEAD_LETTER_VIEW, f"0:{first}", "map", '{"error": "E", "traceback": "T"}')],
               2, {})  # fmt: skip
    runner = CliRunner()
    now = orjson.loads(
        runner.invoke(cli, ["inspect", "profiles", "alice", "--json"], env=env).output
    )
    assert now["rows"] == {"profile": {"user": "alice", "name": "two"}}
    then = runner.invoke(cli, ["inspect", "profiles", "alice", "--as-of", f"0:{first}", "--json"],
                         env=env)  # fmt: skip
    assert then.exit_code == 0, then.output
    assert orjson.loads(then.output)["rows"] == {"profile": {"user": "alice", "name": "one"}}
    letters = runner.invoke(cli, ["deadletters", "list", "--json"], env=env)
    assert letters.exit_code == 0, letters.output
    assert f"0:{first}" in letters.output


def test_the_source_sets_aside_an_undecodable_entry_on_a_cluster(
    cluster_store: RedisCluster, cluster_url: str
) -> None:
    good = {"type": "profile_set", "key": "alice", "time": "1",
            "payload": '{"user": "alice", "name": "A"}'}  # fmt: skip
    cluster_store.xadd(log_stream(partition_for("alice", 4)), good)
    bad = cluster_store.xadd(log_stream(2), {"type": "profile_set", "key": "bob"}).decode()
    reader = LogPrefetchReader(cluster_url, 4, 100, (screen_option(chirp), "profiles"))
    batches, _ = reader.read(reader.initialOffset())
    assert [r["key"] for b in batches for r in b.to_pylist()] == ["alice"]
    assert cluster_store.hkeys("lv:{d}:deadletters:profiles") == [f"2:{bad}".encode()]


def _xrange_calls(client: RedisCluster, nodes: str) -> int:
    stats = client.info("commandstats", target_nodes=nodes)
    return sum(int(s.get("cmdstat_xrange", {}).get("calls", 0)) for s in stats.values())


def test_the_source_reads_the_log_from_the_replicas(
    cluster_store: RedisCluster, cluster_url: str
) -> None:
    partitions = 4
    ids = [cluster_store.xadd(log_stream(p), {
        "type": b"t", "key": b"k", "time": b"1", "payload": b"{}"}) for p in range(partitions)]  # fmt: skip
    for p in range(partitions):  # the replicas have them before the read
        node_client(cluster_store, log_stream(p)).execute_command("WAIT", 1, 5000)
    primaries = _xrange_calls(cluster_store, RedisCluster.PRIMARIES)
    replicas = _xrange_calls(cluster_store, RedisCluster.REPLICAS)
    reader = LogPrefetchReader(cluster_url, partitions, 100, ("", ""))
    batches, end = reader.read(reader.initialOffset())
    assert end == {str(p): ids[p].decode() for p in range(partitions)}
    assert sum(b.num_rows for b in batches) == partitions
    assert _xrange_calls(cluster_store, RedisCluster.REPLICAS) == replicas + partitions
    assert _xrange_calls(cluster_store, RedisCluster.PRIMARIES) == primaries
