"""Subscriptions to the keys of a view with a prefix, or to the whole view, over SSE and
WebSocket: the snapshot, live deltas of matching keys only, keys the subject may not read left
out, refusals, and resume across shards."""

from __future__ import annotations

import aiohttp
import pytest
import redis

from tests.server.query.support import PrefixState, Socket, stored_keys
from tests.support.gateway import ServedGateway, Writer, open_sse


def task(title: str) -> dict[str, str]:
    return {"title": title}


async def test_a_prefix_gets_its_keys_then_their_deltas_only(
    query_gateway: ServedGateway, store: redis.Redis, query_writer: Writer
) -> None:
    gw = query_gateway
    query_writer.write([
        ("tasks", "b1/t1", "task", task("one")), ("tasks", "b1/t2", "task", task("two")),
        ("tasks", "b2/t1", "task", task("other board")),
    ])  # fmt: skip
    async with aiohttp.ClientSession() as s:
        sse = await open_sse(s, f"{gw.url}/v1/live", gw.headers(), {"view": "tasks",
                                                                    "prefix": "b1/"})  # fmt: skip
        state = PrefixState()
        first = await sse.next()
        assert first.event == "snapshot" and first.data["prefix"] == "b1/"
        state.take(first)
        assert state.keys == {"b1/t1": {"task": task("one")}, "b1/t2": {"task": task("two")}}
        query_writer.write([("tasks", "b2/t2", "task", task("not mine"))])
        query_writer.write([("tasks", "b1/t3", "task", task("three"))])
        query_writer.write([("tasks", "b1/t1", "task", None)])
        for _ in range(2):
            state.take(await sse.next(skip=("progress",)))
        await sse.close()
    assert state.keys == stored_keys(store, "tasks", "b1/")
    assert set(state.keys) == {"b1/t2", "b1/t3"}
    assert state.deltas == 2


async def test_the_whole_view_over_websocket_and_a_resume_in_another_socket(
    query_gateway: ServedGateway, store: redis.Redis, query_writer: Writer
) -> None:
    gw = query_gateway
    keys = [f"b{i % 3}/t{i}" for i in range(12)]  # over several shards
    query_writer.write([("tasks", k, "task", task(k)) for k in keys[:6]])
    async with aiohttp.ClientSession() as s:
        ws = Socket(await s.ws_connect(gw.ws_url, headers=gw.headers()))
        await ws.send(type="subscribe", sub="all", view="tasks", prefix="")
        state = PrefixState()
        snap = await ws.next()
        assert snap["type"] == "snapshot", snap
        state.apply(snap["type"], snap.get("id"), snap["data"])
        assert set(state.keys) == set(keys[:6])
        query_writer.write([("tasks", k, "task", task(k)) for k in keys[6:9]])
        for _ in range(3):
            m = await ws.next()
            state.apply(m["type"], m.get("id"), m["data"])
        await ws.ws.close()
        # Away: more keys change in several shards; the resume sends exactly those.
        query_writer.write([("tasks", k, "task", task(k + "!")) for k in keys[9:]])
        query_writer.write([("tasks", keys[0], "task", None)])
        ws = Socket(await s.ws_connect(gw.ws_url, headers=gw.headers()))
        await ws.send(type="subscribe", sub="all", view="tasks", prefix="",
                      last_event_id=state.last_id)  # fmt: skip
        for _ in range(4):
            m = await ws.next()
            assert m["type"] == "delta", m
            state.apply(m["type"], m.get("id"), m["data"])
        await ws.ws.close()
    assert state.keys == stored_keys(store, "tasks", "")
    assert state.resets == 0


async def test_keys_the_subject_may_not_read_are_never_sent(
    query_gateway: ServedGateway, store: redis.Redis, query_writer: Writer
) -> None:
    gw = query_gateway
    query_writer.write([("drafts", "alice/d1", "draft", {"text": "mine"}),
                        ("drafts", "bob/d1", "draft", {"text": "bob's"})])  # fmt: skip
    async with aiohttp.ClientSession() as s:
        sse = await open_sse(s, f"{gw.url}/v1/live", gw.headers("alice"), {"view": "drafts"})
        snap = await sse.next()
        assert set(snap.data["keys"]) == {"alice/d1"}
        query_writer.write([("drafts", "bob/d2", "draft", {"text": "secret"})])
        query_writer.write([("drafts", "alice/d2", "draft", {"text": "also mine"})])
        delta = await sse.next(skip=("progress",))
        assert delta.data["key"] == "alice/d2"
        # Resuming from an id whose positions precede bob's delta still leaves it out.
        await sse.close()
        sse = await open_sse(s, f"{gw.url}/v1/live", gw.headers("alice") | {
            "Last-Event-ID": snap.id or ""}, {"view": "drafts"})  # fmt: skip
        again = await sse.next(skip=("progress",))
        assert again.event == "delta" and again.data["key"] == "alice/d2"
        await sse.close()


@pytest.mark.parametrize(
    ("params", "status", "code"),
    [
        ({"view": "scores"}, 400, "not_listable"),
        ({"view": "nope"}, 404, "unknown_view"),
        ({}, 400, "invalid_parameter"),
        ({"view": "tasks", "key": "b1/t1"}, 400, "invalid_parameter"),
        ({"view": "tasks", "prefix": "x" * 257}, 400, "invalid_parameter"),
    ],
)
async def test_a_prefix_that_cannot_be_served_is_refused_with_a_code(
    query_gateway: ServedGateway, params: dict[str, str], status: int, code: str
) -> None:
    gw = query_gateway
    async with aiohttp.ClientSession() as s, s.get(
        f"{gw.url}/v1/live", headers=gw.headers(), params=params
    ) as resp:  # fmt: skip
        assert resp.status == status
        assert (await resp.json())["code"] == code


async def test_an_id_of_another_form_is_refused(query_gateway: ServedGateway) -> None:
    gw = query_gateway
    async with aiohttp.ClientSession() as s:
        for bad in ["ab.1-0", "ab.1-0~2-0", "ab." + "~".join(["x"] * 8)]:
            async with s.get(f"{gw.url}/v1/live", params={"view": "tasks"},
                             headers=gw.headers() | {"Last-Event-ID": bad}) as resp:  # fmt: skip
                assert resp.status == 400
                assert (await resp.json())["code"] == "invalid_last_event_id"
        ws = Socket(await s.ws_connect(gw.ws_url, headers=gw.headers()))
        await ws.send(type="subscribe", sub="q", view="tasks", prefix="b", key="b1")
        assert (await ws.next())["code"] == "invalid_message"
        await ws.send(type="subscribe", sub="q", view="tasks", prefix="b", limit=3)
        assert (await ws.next())["code"] == "invalid_message"
        await ws.send(type="subscribe", sub="q", view="scores", prefix="")
        assert (await ws.next())["code"] == "not_listable"
        await ws.ws.close()


async def test_a_replaced_store_resets_a_prefix_subscription(
    query_gateway: ServedGateway, store: redis.Redis, query_writer: Writer
) -> None:
    gw = query_gateway
    query_writer.write([("tasks", "b1/t1", "task", task("before"))])
    async with aiohttp.ClientSession() as s:
        sse = await open_sse(s, f"{gw.url}/v1/live", gw.headers(), {"view": "tasks"})
        state = PrefixState()
        state.take(await sse.next())
        store.flushdb()
        query_writer.write([("tasks", "b1/t9", "task", task("after"))])
        reset = await sse.next(skip=("progress",))
        assert reset.event == "reset" and reset.data["code"] == "epoch_changed"
        state.take(reset)
        state.take(await sse.next(skip=("progress",)))
        assert state.keys == {"b1/t9": {"task": task("after")}}
        await sse.close()


async def test_a_key_with_a_slash_is_one_segment_written_percent_2f(
    query_gateway: ServedGateway, store: redis.Redis, query_writer: Writer
) -> None:
    gw = query_gateway
    query_writer.write([("tasks", "b1/t1", "task", task("one")),
                        ("tasks", "b1/live", "task", task("a key that ends in /live"))])  # fmt: skip
    async with aiohttp.ClientSession() as s:
        async with s.get(f"{gw.url}/v1/views/tasks/b1%2Ft1", headers=gw.headers()) as resp:
            assert resp.status == 200
            assert (await resp.json())["rows"] == {"task": task("one")}
        async with s.get(f"{gw.url}/v1/views/tasks/b1%2Flive", headers=gw.headers()) as resp:
            assert resp.status == 200, "a key that ends in /live is read, not streamed"
            assert (await resp.json())["rows"] == {"task": task("a key that ends in /live")}
        sse = await open_sse(s, f"{gw.url}/v1/views/tasks/b1%2Ft1/live", gw.headers())
        snap = await sse.next()
        assert (snap.data["key"], snap.data["rows"]) == ("b1/t1", {"task": task("one")})
        query_writer.write([("tasks", "b1/t1", "task", task("uno"))])
        delta = await sse.next(skip=("progress",))
        assert delta.data["key"] == "b1/t1"
        await sse.close()
        for path in ("/v1/views/tasks/b1/t1", "/v1/views/tasks/b1/t1/live"):
            async with s.get(gw.url + path, headers=gw.headers()) as resp:
                assert resp.status == 404
                assert (await resp.json())["code"] == "not_found"


async def test_many_prefixes_of_one_view_each_get_their_keys(
    query_gateway: ServedGateway, query_writer: Writer
) -> None:
    """More distinct prefixes than a key has characters: the hub looks a key's deltas up by the
    key's own prefixes then, and must find the same subscribers as by comparing each."""
    gw = query_gateway
    prefixes = ["", "b", "b1", "b1/", "b1/t", "b1/t1", "b1/t10", "b2/", "c", "b1/u"]
    keys = ["b1/t1", "b1/t10", "b1/t2", "b2/t1", "c/t1", "b1/u9"]
    expected = {f"p{i}": {k for k in keys if k.startswith(p)} for i, p in enumerate(prefixes)}
    got: dict[str, set[str]] = {sub: set() for sub in expected}
    async with aiohttp.ClientSession() as s:
        # Five subscriptions a socket, the test settings' most.
        sockets = [Socket(await s.ws_connect(gw.ws_url, headers=gw.headers())) for _ in range(2)]
        for i, prefix in enumerate(prefixes):
            ws = sockets[i // 5]
            await ws.send(type="subscribe", sub=f"p{i}", view="tasks", prefix=prefix)
            first = await ws.next()
            assert first["type"] == "snapshot", first
        query_writer.write([("tasks", k, "task", task(k)) for k in keys])
        for n, ws in enumerate(sockets):
            subs = [f"p{i}" for i in range(len(prefixes)) if i // 5 == n]
            for _ in range(sum(len(expected[sub]) for sub in subs)):
                m = await ws.next()
                assert m["type"] == "delta", m
                got[m["sub"]].add(m["data"]["key"])
            await ws.ws.close()
    assert got == expected
