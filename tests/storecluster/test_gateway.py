"""The gateway on a store cluster, served by a real uvicorn: a key over SSE and WebSocket through
a restart of the gateway, a prefix over shards on several servers, a window, and publishing once
per Idempotency-Key, also when a primary fails over in the middle of a batch.

Deltas are written through the real sink (``tests.support.gateway.Writer``), as the pipeline
writes them on a cluster.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest
from redis.cluster import RedisCluster

from liveviews.changes.topic import changes_stream, shard_for
from liveviews.log.events import log_stream, partition_for
from liveviews.store.client import connect
from liveviews.store.cluster import StoreCluster
from tests.server.query.support import PrefixState, Socket, WindowState
from tests.support.gateway import Event, ServedGateway, State, Writer, open_sse
from tests.support.gateway_settings import PARTITIONS, SHARDS, settings_for

QUERY_APP = "tests.support.queryapp:app"


@pytest.fixture(scope="module")
def query_gateway(cluster_url: str) -> Iterator[ServedGateway]:
    """The query application's gateway; a partition's append gives up after 1 s of failover."""
    settings = settings_for(cluster_url, LV_APP=QUERY_APP, LV_APPEND_RETRY_SECONDS="1")
    served = ServedGateway(settings).start()
    yield served
    served.stop()


@pytest.fixture()
def writer(cluster_store: RedisCluster) -> Writer:
    from demo.chirp import app

    return Writer(cluster_store, app, SHARDS)


@pytest.fixture()
def query_writer(cluster_store: RedisCluster) -> Writer:
    from tests.support.queryapp import app

    return Writer(cluster_store, app, SHARDS)


def ws_event(message: dict[str, Any]) -> Event:
    return Event(message["type"], message.get("id"), message.get("data", {}))


async def test_a_key_over_sse_and_websocket_gets_each_delta_once_and_resumes_after_a_restart(
    cluster_url: str, writer: Writer
) -> None:
    by_sse, by_ws = State(), State()
    first = ServedGateway(settings_for(cluster_url)).start()
    try:
        async with aiohttp.ClientSession() as s:
            sse = await open_sse(s, first.url + "/v1/views/profiles/alice/live", first.headers())
            ws = Socket(await s.ws_connect(first.ws_url, headers=first.headers()))
            await ws.send(type="subscribe", sub="a", view="profiles", key="alice")
            by_sse.apply(await sse.next())
            by_ws.apply(ws_event(await ws.next()))
            for i in range(5):
                writer.write([("profiles", "alice", "profile", {"n": i})])
            for _ in range(5):
                by_sse.apply(await sse.next(skip=("progress",)))
                by_ws.apply(ws_event(await ws.next()))
            await sse.close()
            await ws.ws.close()
    finally:
        first.stop()
    for i in range(5, 9):  # while no gateway runs
        writer.write([("profiles", "alice", "profile", {"n": i})])
    second = ServedGateway(settings_for(cluster_url)).start()
    try:
        async with aiohttp.ClientSession() as s:
            assert by_sse.last_id is not None
            sse = await open_sse(s, second.url + "/v1/views/profiles/alice/live",
                                 {**second.headers(), "Last-Event-ID": by_sse.last_id})  # fmt: skip
            ws = Socket(await s.ws_connect(second.ws_url, headers=second.headers()))
            await ws.send(type="subscribe", sub="a", view="profiles", key="alice",
                          last_event_id=by_ws.last_id)  # fmt: skip
            for _ in range(4):
                by_sse.apply(await sse.next(skip=("progress",)))
                by_ws.apply(ws_event(await ws.next()))
            writer.write([("profiles", "alice", "profile", {"n": 9})])
            by_sse.apply(await sse.next(skip=("progress",)))
            by_ws.apply(ws_event(await ws.next()))
            await sse.close()
            await ws.ws.close()
    finally:
        second.stop()
    for state in (by_sse, by_ws):
        assert state.rows == {"profile": {"n": 9}}
        assert len(state.ids) == 10 and state.resets == 0  # State refuses a duplicate itself


async def test_a_prefix_over_shards_on_several_servers_gets_its_keys_then_resumes(
    query_gateway: ServedGateway, cluster_store: RedisCluster, query_writer: Writer
) -> None:
    gw = query_gateway
    keys = [f"b{i % 2}/t{i}" for i in range(16)]
    servers = {cluster_store.get_node_from_key(changes_stream(shard_for("tasks", k, SHARDS))).name
               for k in keys if k.startswith("b1/")}  # fmt: skip
    assert len(servers) >= 2
    mine = [k for k in keys if k.startswith("b1/")]
    query_writer.write([("tasks", k, "task", {"title": k}) for k in keys[:8]])
    state = PrefixState()
    async with aiohttp.ClientSession() as s:
        params = {"view": "tasks", "prefix": "b1/"}
        sse = await open_sse(s, f"{gw.url}/v1/live", gw.headers(), params)
        state.take(await sse.next())
        assert set(state.keys) == set(mine[:4])
        query_writer.write([("tasks", k, "task", {"title": k}) for k in keys[8:12]])
        for _ in range(2):  # only b1's two keys of those four
            state.take(await sse.next(skip=("progress",)))
        await sse.close()
        query_writer.write([("tasks", k, "task", {"title": k + "!"}) for k in keys[12:]])
        query_writer.write([("tasks", mine[0], "task", None)])
        assert state.last_id is not None
        sse = await open_sse(s, f"{gw.url}/v1/live",
                             {**gw.headers(), "Last-Event-ID": state.last_id}, params)  # fmt: skip
        for _ in range(3):
            state.take(await sse.next(skip=("progress",)))
        await sse.close()
    expected = {k: {"task": {"title": k + ("!" if k in keys[12:] else "")}} for k in mine[1:]}
    assert state.keys == expected
    assert state.resets == 0


async def test_a_window_follows_its_top_rows(
    query_gateway: ServedGateway, query_writer: Writer
) -> None:
    gw = query_gateway

    def points(n: float) -> dict[str, Any]:
        return {"points": n, "score": n}

    query_writer.write([("scores", "g1", p, points(n))
                        for p, n in [("ann", 5), ("bob", 9), ("cat", 7)]])  # fmt: skip
    state = WindowState()
    async with aiohttp.ClientSession() as s:
        sse = await open_sse(s, f"{gw.url}/v1/views/scores/g1/live", gw.headers(), {"limit": "2"})
        state.take(await sse.next())
        assert state.ordered() == ["bob", "cat"]
        query_writer.write([("scores", "g1", "ann", points(1))])  # outside the window: nothing
        query_writer.write([("scores", "g1", "eve", points(8))])
        state.take(await sse.next(skip=("progress",)))
        assert state.ordered() == ["bob", "eve"] and state.deltas == 1
        await sse.close()


def batch(n: int, tag: str) -> list[dict[str, Any]]:
    """Events over every log partition: a board each."""
    return [{"type": "task_set", "payload": {"board": f"b{i}", "task": tag, "title": f"{tag}{i}"}}
            for i in range(n)]  # fmt: skip


def logged_titles(client: RedisCluster) -> list[str]:
    import orjson

    out = []
    for p in range(PARTITIONS):
        for _, fields in client.xrange(log_stream(p)):
            out.append(orjson.loads(fields[b"payload"])["title"])
    return out


async def post(s: aiohttp.ClientSession, gw: ServedGateway, events: Any, key: str | None) -> Any:
    headers = gw.headers() | ({"Idempotency-Key": key} if key is not None else {})
    async with s.post(gw.url + "/v1/events", json=events, headers=headers) as r:
        return r.status, await r.json()


async def test_a_batch_with_an_idempotency_key_is_appended_once(
    query_gateway: ServedGateway, cluster_store: RedisCluster
) -> None:
    gw = query_gateway
    events = batch(8, "x")
    assert len({partition_for(f"b{i}", PARTITIONS) for i in range(8)}) == PARTITIONS
    async with aiohttp.ClientSession() as s:
        first = await post(s, gw, events, "order-1")
        again = await post(s, gw, events, "order-1")
        keyless = await post(s, gw, events, None)
        one = await post(s, gw, batch(1, "z"), "order-2")
        # Other events under a key: refused before any partition, also those order-2 missed.
        other = await post(s, gw, batch(8, "y"), "order-2")
        bad = await post(s, gw, events, "not a key")
    assert first[0] == again[0] == keyless[0] == one[0] == 202
    assert first[1] == again[1]
    assert keyless[1]["offsets"] != first[1]["offsets"]
    assert other[0] == 422 and other[1]["code"] == "idempotency_key_reused"
    assert bad[0] == 400 and bad[1]["code"] == "invalid_idempotency_key"
    assert sorted(logged_titles(cluster_store)) == sorted([f"x{i}" for i in range(8)] * 2 + ["z0"])


async def replicated(cluster: StoreCluster, node: int, timeout: float = 30) -> None:
    """Until the primary ``node`` has a replica in sync: only such a replica takes over."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with cluster.client(node) as c:
            info: Any = c.info("replication")
        if any(str(v.get("state")) == "online" and int(v.get("lag", 9)) <= 1
               for k, v in info.items() if k.startswith("slave")):  # fmt: skip
            return
        await asyncio.sleep(0.2)
    raise AssertionError(f"node {node} has no replica in sync")


async def test_a_partition_whose_primary_fails_is_appended_by_the_retry_with_the_same_key(
    query_gateway: ServedGateway, store_cluster: StoreCluster, cluster_store: RedisCluster
) -> None:
    gw = query_gateway
    events = batch(8, "p")
    lost = partition_for("b0", PARTITIONS)
    primary = cluster_store.get_node_from_key(log_stream(lost))
    node = int(primary.port) - store_cluster.port
    key = f"failover-{uuid.uuid4().hex}"

    def node_of(partition: int) -> str:
        return str(cluster_store.get_node_from_key(log_stream(partition)).name)

    await replicated(store_cluster, node)
    store_cluster.kill(node)
    try:
        async with aiohttp.ClientSession() as s:
            status, body = await post(s, gw, events, key)
            assert status == 503 and body["code"] == "partial_append", body
            assert "Idempotency-Key" in body["message"]
            appended = body["appended"]
            missing = [i for i, o in enumerate(appended) if o is None]
            on_it = {p for p in range(PARTITIONS) if node_of(p) == primary.name}
            assert missing == [i for i in range(8) if partition_for(f"b{i}", PARTITIONS) in on_it]
            assert len(missing) < 8
            deadline = time.monotonic() + 30
            while True:  # the replica takes over within a few seconds; each retry is safe
                status, body = await post(s, gw, events, key)
                if status == 202 or time.monotonic() > deadline:
                    break
                assert body["code"] in ("partial_append", "store_unavailable"), body
                await asyncio.sleep(0.5)
            assert status == 202, body
            offsets = body["offsets"]
            assert all(offsets[i] == o for i, o in enumerate(appended) if o is not None)
            assert (await post(s, gw, events, key))[1] == body
        live = next(n for n in range(store_cluster.nodes) if n != node)
        reader = connect(store_cluster.node_url(live), socket_timeout=10)
        assert isinstance(reader, RedisCluster)
        try:
            assert sorted(logged_titles(reader)) == sorted(f"p{i}" for i in range(8))
        finally:
            reader.close()
    finally:
        store_cluster.start_node(node)
        store_cluster.wait_ok()


async def test_the_log_feed_reads_every_partition(
    query_gateway: ServedGateway, cluster_store: RedisCluster
) -> None:
    gw = query_gateway
    async with aiohttp.ClientSession() as s:
        sse = await open_sse(s, gw.url + "/v1/log/live", gw.headers(), {"recent": "0"})
        status, body = await post(s, gw, batch(8, "l"), None)
        assert status == 202
        seen = [await sse.next(skip=("heartbeat",)) for _ in range(8)]
        await sse.close()
    assert {(f.data["partition"], f.data["id"]) for f in seen} == {
        (o["partition"], o["id"]) for o in body["offsets"]
    }
