"""Filtered prefix subscriptions (docs/PROTOCOL.md, section 5.2) over SSE and WebSocket: the
snapshot holds the matching rows only, rows move in and out, a change outside the filter sends
nothing, the read rule applies first, a resume sends what changed (or a reset for another
filter's id), and malformed filters are refused with a code."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import pytest
import redis

from tests.server.query.support import PrefixState, Socket, stored_keys
from tests.support.gateway import ServedGateway, Writer, open_sse

MINE = {"field": "owner", "eq": "ada"}


def task(title: str, owner: str | None = None, size: int = 1) -> dict[str, Any]:
    return {"title": title, "owner": owner, "size": size}


def matching(keys: dict[str, dict[str, Any]], f: Any) -> dict[str, dict[str, Any]]:
    """The truth a filtered subscriber must hold, for the filters these tests use."""
    from liveviews.gateway.wire.filters import parse

    checked = parse(f)
    out = {}
    for key, rows in keys.items():
        kept = {r: v for r, v in rows.items() if checked.matches(v)}
        if kept:
            out[key] = kept
    return out


async def test_rows_move_in_and_out_and_the_rest_is_never_sent(
    query_gateway: ServedGateway, store: redis.Redis, query_writer: Writer
) -> None:
    gw = query_gateway
    query_writer.write([
        ("tasks", "b1/t1", "task", task("mine", "ada")),
        ("tasks", "b1/t2", "task", task("theirs", "grace")),
        ("tasks", "b1/t3", "task", task("nobody's")),
        ("tasks", "b2/t1", "task", task("other board, mine", "ada")),
    ])  # fmt: skip
    async with aiohttp.ClientSession() as s:
        sse = await open_sse(s, f"{gw.url}/v1/live", gw.headers(),
                             {"view": "tasks", "prefix": "b1/", "filter": json.dumps(MINE)})  # fmt: skip
        state = PrefixState()
        snap = await sse.next()
        state.take(snap)
        assert state.keys == {"b1/t1": {"task": task("mine", "ada")}}
        assert snap.id is not None and snap.id.count(".") == 2, "the id ends in the digest"

        query_writer.write([("tasks", "b1/t2", "task", task("theirs, renamed", "grace"))])
        query_writer.write([("tasks", "b1/t3", "task", task("taken", "ada"))])  # moves in
        moved_in = await sse.next(skip=("progress",))
        assert moved_in.data == {"view": "tasks", "key": "b1/t3", "ops": [
            {"op": "upsert", "row": "task", "value": task("taken", "ada")}]}  # fmt: skip
        state.take(moved_in)
        query_writer.write([("tasks", "b1/t1", "task", task("given away", "grace"))])
        moved_out = await sse.next(skip=("progress",))
        assert moved_out.data["ops"] == [{"op": "delete", "row": "task"}]
        state.take(moved_out)
        query_writer.write([("tasks", "b1/t1", "task", None)])  # not held: nothing
        query_writer.write([("tasks", "b1/t3", "task", task("taken, bigger", "ada", 5))])
        changed = await sse.next(skip=("progress",))
        assert changed.data["key"] == "b1/t3"
        state.take(changed)
        query_writer.write([("tasks", "b1/t3", "task", None)])  # held: deleted
        state.take(await sse.next(skip=("progress",)))
        await sse.close()
    assert state.keys == matching(stored_keys(store, "tasks", "b1/"), MINE) == {}
    assert state.deltas == 4


async def test_a_resume_sends_what_changed_and_another_filter_is_reset(
    query_gateway: ServedGateway, store: redis.Redis, query_writer: Writer
) -> None:
    gw = query_gateway
    where = {"and": [{"field": "owner", "eq": "ada"}, {"field": "size", "gte": 3}]}
    keys = [f"b{i % 3}/t{i}" for i in range(12)]  # over several shards
    query_writer.write([("tasks", k, "task", task(k, "ada", i)) for i, k in enumerate(keys)])
    async with aiohttp.ClientSession() as s:
        ws = Socket(await s.ws_connect(gw.ws_url, headers=gw.headers()))
        await ws.send(type="subscribe", sub="f", view="tasks", prefix="", filter=where)
        state = PrefixState()
        snap = await ws.next()
        state.apply(snap["type"], snap.get("id"), snap["data"])
        assert set(state.keys) == set(keys[3:])
        await ws.ws.close()
        # Away: rows move in, move out, change, are deleted, or change outside the filter.
        query_writer.write([
            ("tasks", keys[1], "task", task("grown", "ada", 4)),  # in
            ("tasks", keys[4], "task", task("shrunk", "ada", 1)),  # out
            ("tasks", keys[5], "task", task("renamed", "ada", 5)),  # changed
            ("tasks", keys[6], "task", None),  # deleted
            ("tasks", keys[0], "task", task("still small", "ada", 2)),  # outside
        ])  # fmt: skip
        query_writer.write([("tasks", keys[7], "task", task("given", "grace", 9))])  # out
        query_writer.write([("tasks", keys[7], "task", task("back", "ada", 9))])  # back in
        ws = Socket(await s.ws_connect(gw.ws_url, headers=gw.headers()))
        await ws.send(type="subscribe", sub="f", view="tasks", prefix="", filter=where,
                      last_event_id=state.last_id)  # fmt: skip
        got = []
        for _ in range(6):
            m = await ws.next()
            assert m["type"] == "delta", m
            got.append(m["data"]["key"])
            state.apply(m["type"], m.get("id"), m["data"])
        assert sorted(got) == sorted(keys[i] for i in (0, 1, 4, 5, 6, 7))
        assert state.keys == matching(stored_keys(store, "tasks", ""), where)
        assert state.resets == 0
        # The same filter with its members in another order resumes too; another filter does
        # not: its rows would not be the client's.
        await ws.send(type="unsubscribe", sub="f")
        assert (await ws.next())["type"] == "unsubscribed"
        query_writer.write([("tasks", keys[8], "task", task("eight", "ada", 8))])
        reordered = {"and": [{"gte": 3, "field": ["size"]}, {"eq": "ada", "field": "owner"}]}
        await ws.send(type="subscribe", sub="g", view="tasks", prefix="", filter=reordered,
                      last_event_id=state.last_id)  # fmt: skip
        m = await ws.next()
        assert (m["sub"], m["type"], m["data"].get("key")) == ("g", "delta", keys[8]), m
        await ws.send(type="subscribe", sub="h", view="tasks", prefix="", filter=MINE,
                      last_event_id=state.last_id)  # fmt: skip
        reset = await ws.next()
        assert (reset["sub"], reset["type"], reset["data"]["code"]) == ("h", "reset",
                                                                       "unknown_position")  # fmt: skip
        again = await ws.next()
        assert again["type"] == "snapshot"
        assert again["data"]["keys"] == matching(stored_keys(store, "tasks", ""), MINE)
        await ws.ws.close()


async def test_the_read_rule_applies_before_the_filter(
    query_gateway: ServedGateway, query_writer: Writer
) -> None:
    gw = query_gateway
    where = {"field": "text", "ne": "draft"}
    query_writer.write([("drafts", "alice/d1", "draft", {"text": "mine"}),
                        ("drafts", "bob/d1", "draft", {"text": "bob's"})])  # fmt: skip
    async with aiohttp.ClientSession() as s:
        sse = await open_sse(s, f"{gw.url}/v1/live", gw.headers("alice"),
                             {"view": "drafts", "filter": json.dumps(where)})  # fmt: skip
        snap = await sse.next()
        assert snap.data["keys"] == {"alice/d1": {"draft": {"text": "mine"}}}
        query_writer.write([("drafts", "bob/d2", "draft", {"text": "matches, not alice's"})])
        query_writer.write([("drafts", "alice/d2", "draft", {"text": "also mine"})])
        delta = await sse.next(skip=("progress",))
        assert delta.data["key"] == "alice/d2"
        await sse.close()
        # A resume from before bob's delta leaves it out as well.
        sse = await open_sse(s, f"{gw.url}/v1/live", gw.headers("alice") | {
            "Last-Event-ID": snap.id or ""}, {"view": "drafts", "filter": json.dumps(where)})  # fmt: skip
        again = await sse.next(skip=("progress",))
        assert again.event == "delta" and again.data["key"] == "alice/d2"
        await sse.close()


@pytest.mark.parametrize(
    ("path", "params", "code"),
    [
        ("/v1/live", {"view": "tasks", "filter": '{"field": "owner"}'}, "invalid_filter"),
        ("/v1/live", {"view": "tasks", "filter": "owner = 'ada'"}, "invalid_filter"),
        ("/v1/live", {"view": "tasks", "filter": json.dumps({"not": [MINE]})}, "invalid_filter"),
        ("/v1/views/tasks/b1%2Ft1/live", {"filter": json.dumps(MINE)}, "invalid_parameter"),
        ("/v1/views/scores/g1/live", {"limit": "3", "filter": json.dumps(MINE)},
         "invalid_parameter"),
    ],
)  # fmt: skip
async def test_a_filter_that_cannot_be_served_is_refused_over_sse(
    query_gateway: ServedGateway, path: str, params: dict[str, str], code: str
) -> None:
    gw = query_gateway
    async with aiohttp.ClientSession() as s, s.get(
        gw.url + path, headers=gw.headers(), params=params
    ) as resp:  # fmt: skip
        assert resp.status == 400
        body = await resp.json()
        assert body["code"] == code and "filter" in body["message"]


async def test_a_filter_that_cannot_be_served_is_refused_over_websocket(
    query_gateway: ServedGateway,
) -> None:
    gw = query_gateway
    async with aiohttp.ClientSession() as s:
        ws = Socket(await s.ws_connect(gw.ws_url, headers=gw.headers()))
        await ws.send(type="subscribe", sub="a", view="tasks", prefix="",
                      filter={"field": "size", "gt": True})  # fmt: skip
        error = await ws.next()
        assert (error["type"], error["sub"], error["code"]) == ("error", "a", "invalid_filter")
        assert error["message"].startswith("filter.gt: ")
        await ws.send(type="subscribe", sub="b", view="tasks", key="b1/t1", filter=MINE)
        assert (await ws.next())["code"] == "invalid_message"
        # The socket and the same id serve a good subscription afterwards.
        await ws.send(type="subscribe", sub="a", view="tasks", prefix="", filter=MINE)
        assert (await ws.next())["type"] == "snapshot"
        await ws.ws.close()
