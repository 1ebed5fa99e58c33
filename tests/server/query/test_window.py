"""Windows of a key: its top rows by score, or a page after a row, over SSE and WebSocket: the
snapshot, a delta for each change of the window and none for a change outside it, resume, and
refusals."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest
import redis

from tests.server.query.support import Socket, WindowState, stored_window
from tests.support.gateway import SSE, ServedGateway, Writer, open_sse

VIEW_LIMIT = 10


def points(n: float) -> dict[str, Any]:
    return {"points": n, "score": n}  # the test writer takes a row's score from "score"


def expected(store: redis.Redis, limit: int, after: tuple[float, str] | None = None) -> list[str]:
    return [row for row, _, _ in stored_window(store, "scores", "g1", VIEW_LIMIT, limit, after)]


async def window(gw: ServedGateway, s: aiohttp.ClientSession, limit: int, **params: str) -> SSE:
    return await open_sse(s, f"{gw.url}/v1/views/scores/g1/live", gw.headers(),
                          {"limit": str(limit), **params})  # fmt: skip


async def test_a_window_holds_the_top_rows_and_follows_them_only(
    query_gateway: ServedGateway, store: redis.Redis, query_writer: Writer
) -> None:
    gw = query_gateway
    query_writer.write([("scores", "g1", p, points(n)) for p, n in
                        [("ann", 5), ("bob", 9), ("cat", 7), ("dan", 1)]])  # fmt: skip
    async with aiohttp.ClientSession() as s:
        sse = await window(gw, s, 2)
        state = WindowState()
        snap = await sse.next()
        state.take(snap)
        assert snap.data["limit"] == 2 and state.ordered() == ["bob", "cat"]
        assert snap.data["scores"] == {"bob": 9.0, "cat": 7.0}
        query_writer.write([("scores", "g1", "dan", points(2))])  # below the window: nothing
        query_writer.write([("scores", "g1", "eve", points(8))])  # enters, pushes cat out
        delta = await sse.next(skip=("progress",))
        assert delta.event == "delta"
        assert delta.data["ops"] == [
            {"op": "upsert", "row": "eve", "value": points(8), "score": 8.0},
            {"op": "delete", "row": "cat"},
        ]
        state.take(delta)
        query_writer.write([("scores", "g1", "bob", None)])  # leaves: cat comes back
        state.take(await sse.next(skip=("progress",)))
        query_writer.write([("scores", "g1", "cat", points(20))])  # same row, moves up
        state.take(await sse.next(skip=("progress",)))
        assert state.ordered() == expected(store, 2) == ["cat", "eve"]
        assert state.rows["cat"] == points(20)
        await sse.close()


async def test_pages_follow_the_row_they_start_after(
    query_gateway: ServedGateway, store: redis.Redis, query_writer: Writer
) -> None:
    gw = query_gateway
    query_writer.write([("scores", "g1", f"p{n}", points(n)) for n in range(1, 9)])
    async with aiohttp.ClientSession() as s:
        first = await window(gw, s, 3)
        page1 = WindowState()
        page1.take(await first.next())
        assert page1.ordered() == ["p8", "p7", "p6"]
        last = page1.ordered()[-1]
        ws = Socket(await s.ws_connect(gw.ws_url, headers=gw.headers()))
        await ws.send(type="subscribe", sub="p2", view="scores", key="g1", limit=3,
                      after={"score": page1.scores[last], "row": last})  # fmt: skip
        page2 = WindowState()
        m = await ws.next()
        page2.apply(m["type"], m.get("id"), m["data"])
        assert page2.ordered() == ["p5", "p4", "p3"] == expected(store, 3, (6.0, "p6"))
        # A row entering the first page does not move the second: it starts after p6.
        query_writer.write([("scores", "g1", "top", points(100))])
        page1.take(await first.next(skip=("progress",)))
        assert page1.ordered() == ["top", "p8", "p7"]
        query_writer.write([("scores", "g1", "p4", None)])
        m = await ws.next()
        page2.apply(m["type"], m.get("id"), m["data"])
        assert page2.ordered() == ["p5", "p3", "p2"] == expected(store, 3, (6.0, "p6"))
        await ws.ws.close()
        await first.close()


async def test_a_window_resumes_with_what_changed_in_it_only(
    query_gateway: ServedGateway, store: redis.Redis, query_writer: Writer
) -> None:
    gw = query_gateway
    query_writer.write([("scores", "g1", f"p{n}", points(n)) for n in range(1, 7)])
    async with aiohttp.ClientSession() as s:
        sse = await window(gw, s, 3)
        state = WindowState()
        state.take(await sse.next())
        held = dict(state.rows)
        await sse.close()
        # Away: a row of the window leaves, two enter and push out one that did not change,
        # and rows below it change or stay.
        query_writer.write([("scores", "g1", "p5", None)])
        query_writer.write([("scores", "g1", "p8", points(8)), ("scores", "g1", "p9", points(5.5))])
        query_writer.write([("scores", "g1", "p1", points(1))])  # unchanged value: no delta
        query_writer.write([("scores", "g1", "p2", points(2.5))])  # moves, stays below
        resumed = await open_sse(s, f"{gw.url}/v1/views/scores/g1/live",
                                 gw.headers() | {"Last-Event-ID": state.last_id or ""},
                                 {"limit": "3"})  # fmt: skip
        delta = await resumed.next(skip=("progress",))
        assert delta.event == "delta"
        ops = {op["row"]: op["op"] for op in delta.data["ops"]}
        assert ops == {"p5": "delete", "p8": "upsert", "p9": "upsert", "p4": "delete",
                       "p2": "delete"}, delta.data  # fmt: skip
        state.take(delta)
        assert state.ordered() == expected(store, 3) == ["p8", "p6", "p9"]
        assert held["p6"] == state.rows["p6"]
        await resumed.close()
        # Nothing changed since: a resume sends nothing until the next change.
        again = await open_sse(s, f"{gw.url}/v1/views/scores/g1/live",
                               gw.headers() | {"Last-Event-ID": state.last_id or ""},
                               {"limit": "3"})  # fmt: skip
        query_writer.write([("scores", "g1", "p9", points(9))])
        nxt = await again.next(skip=("progress",))
        assert nxt.event == "delta" and nxt.data["ops"][0]["row"] == "p9"
        await again.close()


@pytest.mark.parametrize(
    ("path", "params", "status", "code"),
    [
        ("/v1/views/tasks/b1/live", {"limit": "3"}, 400, "not_ranked"),
        ("/v1/views/scores/g1/live", {"limit": "11"}, 400, "invalid_parameter"),
        ("/v1/views/scores/g1/live", {"limit": "0"}, 400, "invalid_parameter"),
        ("/v1/views/scores/g1/live", {"limit": "x"}, 400, "invalid_parameter"),
        ("/v1/views/scores/g1/live", {"after_row": "a"}, 400, "invalid_parameter"),
        ("/v1/views/scores/g1/live", {"limit": "2", "after_score": "nan", "after_row": "a"},
         400, "invalid_parameter"),
        ("/v1/views/scores/g1/live", {"limit": "2", "after_score": "1"}, 400,
         "invalid_parameter"),
    ],
)  # fmt: skip
async def test_a_window_that_cannot_be_served_is_refused_with_a_code(
    query_gateway: ServedGateway, path: str, params: dict[str, str], status: int, code: str
) -> None:
    gw = query_gateway
    async with aiohttp.ClientSession() as s, s.get(
        gw.url + path, headers=gw.headers(), params=params
    ) as resp:  # fmt: skip
        assert resp.status == status
        assert (await resp.json())["code"] == code


async def test_a_window_id_is_checked(query_gateway: ServedGateway) -> None:
    gw = query_gateway
    async with aiohttp.ClientSession() as s:
        for bad in ["ab.1-0", "ab.1-0.!!", "ab.1-0.eyJ4Ijp0cnVlfQ"]:
            async with s.get(f"{gw.url}/v1/views/scores/g1/live", params={"limit": "2"},
                             headers=gw.headers() | {"Last-Event-ID": bad}) as resp:  # fmt: skip
                assert resp.status == 400, bad
                assert (await resp.json())["code"] == "invalid_last_event_id"
        ws = Socket(await s.ws_connect(gw.ws_url, headers=gw.headers()))
        await ws.send(type="subscribe", sub="w", view="scores", key="g1", after={"score": 1})
        assert (await ws.next())["code"] == "invalid_message"
        await ws.send(type="subscribe", sub="w", view="scores", key="g1", limit=2,
                      after={"score": "1", "row": "a"})  # fmt: skip
        assert (await ws.next())["code"] == "invalid_message"
        await ws.send(type="subscribe", sub="w", view="scores", key="g1", limit=True)
        assert (await ws.next())["code"] == "invalid_message"
        await ws.ws.close()
