"""Query-shaped subscriptions under random writes, reconnects, resets and replayed batches.

A writer thread writes random batches through the real sink, replaying some (as a pipeline
restarted after a crash does: the sink applies a batch once) and with a change-topic retention
small enough that a subscriber away for long finds its history trimmed (a reset). Subscribers of
a prefix, of the whole view and of windows drop their connection at random points and resume
from their last event id. Every delta is checked as it comes (never twice, a key's in order),
and once the writer stops each subscriber's state must equal the store's: a gap would show as a
difference.
"""

from __future__ import annotations

import asyncio
import random
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import aiohttp
import orjson
import redis

from liveviews.pipeline.sink import ChangeTopicSink
from tests.server.query.support import PrefixState, Socket, WindowState, stored_keys, stored_window
from tests.support.gateway import ServedGateway, open_sse
from tests.support.gateway_settings import SHARDS

TASKS = [f"b{b}/t{t}" for b in range(3) for t in range(6)]
PLAYERS = [f"p{i}" for i in range(12)]
RETENTION = 60
BATCHES = 300
VIEW_LIMIT = 10


def write_randomly(store: redis.Redis, seed: int, done: threading.Event) -> None:
    from tests.support.queryapp import app

    rnd = random.Random(seed)
    sink = ChangeTopicSink(store, app, "queries", SHARDS, RETENTION)
    try:
        for batch in range(1, BATCHES + 1):
            rows = []
            for key in rnd.sample(TASKS, rnd.randint(1, 3)):
                value: dict[str, Any] | None = (
                    None if rnd.random() < 0.2 else {"title": f"{key} #{batch}"}
                )
                rows.append(_row("tasks", key, "task", value, 0.0))
            for player in rnd.sample(PLAYERS, rnd.randint(1, 3)):
                n = rnd.randint(0, 40)
                value = None if rnd.random() < 0.15 else {"points": n}
                rows.append(_row("scores", "g1", player, value, float(n)))
            sink.write(rows, batch, {0: f"{batch}-0"})
            if rnd.random() < 0.1:
                sink.write(rows, batch, {0: f"{batch}-0"})  # replayed after a "crash"
            if rnd.random() < 0.3:
                threading.Event().wait(0.005)
    finally:
        done.set()


def _row(view: str, key: str, row: str, value: Any, score: float) -> dict[str, Any]:
    encoded = None if value is None else orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()
    return {"view": view, "key": key, "row": row, "value": encoded, "score": score}


State = TypeVar("State", PrefixState, WindowState)


async def resuming_sse(
    gw: ServedGateway, s: aiohttp.ClientSession, url: str, params: dict[str, str],
    state: State, agrees: Callable[[], bool], rnd: random.Random, done: threading.Event,
) -> State:  # fmt: skip
    """Read a stream into ``state`` a few frames at a time, away a moment after each, resuming
    from its last event id, until the writer is done and ``agrees()``."""
    while True:
        headers = gw.headers() | ({"Last-Event-ID": state.last_id} if state.last_id else {})
        sse = await open_sse(s, url, headers, params)
        budget = rnd.randint(1, 12)
        while budget > 0 and not (done.is_set() and agrees()):
            try:
                state.take(await sse.next(timeout=0.3, skip=("progress",)))
            except TimeoutError:
                continue
            budget -= 1
        await sse.close()
        if done.is_set() and agrees():
            return state
        await asyncio.sleep(rnd.random() * 0.2)  # away while deltas come


async def sse_prefix(
    gw: ServedGateway, s: aiohttp.ClientSession, store: redis.Redis, prefix: str,
    rnd: random.Random, done: threading.Event,
) -> PrefixState:  # fmt: skip
    state = PrefixState()

    def agrees() -> bool:
        return state.keys == stored_keys(store, "tasks", prefix)

    return await resuming_sse(gw, s, f"{gw.url}/v1/live", {"view": "tasks", "prefix": prefix},
                              state, agrees, rnd, done)  # fmt: skip


async def ws_view(
    gw: ServedGateway, s: aiohttp.ClientSession, store: redis.Redis, rnd: random.Random,
    done: threading.Event,
) -> PrefixState:  # fmt: skip
    state = PrefixState()
    ws = Socket(await s.ws_connect(gw.ws_url, headers=gw.headers()))
    n = 0
    while True:
        n += 1
        sub = f"all{n}"
        await ws.send(type="subscribe", sub=sub, view="tasks", prefix="",
                      **({"last_event_id": state.last_id} if state.last_id else {}))  # fmt: skip
        budget = rnd.randint(1, 12)

        def agrees() -> bool:
            return state.keys == stored_keys(store, "tasks", "")

        while budget > 0 and not (done.is_set() and agrees()):
            try:
                m = await asyncio.wait_for(ws.next(), 0.3)
            except TimeoutError:
                continue
            assert m.get("sub") == sub, m
            state.apply(m["type"], m.get("id"), m["data"])
            budget -= 1
        await ws.send(type="unsubscribe", sub=sub)
        while (m := await ws.next())["type"] != "unsubscribed":
            assert m.get("sub") == sub, m  # frames of the subscription until its end
            state.apply(m["type"], m.get("id"), m["data"])
        if done.is_set() and agrees():
            await ws.ws.close()
            return state
        await asyncio.sleep(rnd.random() * 0.2)


async def sse_window(
    gw: ServedGateway, s: aiohttp.ClientSession, store: redis.Redis, limit: int,
    after: tuple[float, str] | None, rnd: random.Random, done: threading.Event,
) -> WindowState:  # fmt: skip
    state = WindowState()
    params = {"limit": str(limit)}
    if after is not None:
        params |= {"after_score": repr(after[0]), "after_row": after[1]}

    def agrees() -> bool:
        truth = stored_window(store, "scores", "g1", VIEW_LIMIT, limit, after)
        return state.ordered() == [r for r, _, _ in truth] and all(
            state.rows[r] == v and state.scores[r] == sc for r, sc, v in truth
        )

    return await resuming_sse(gw, s, f"{gw.url}/v1/views/scores/g1/live", params, state,
                              agrees, rnd, done)  # fmt: skip


async def test_query_subscriptions_resume_with_no_gap_and_no_duplicate(
    query_gateway: ServedGateway, store: redis.Redis
) -> None:
    gw, rnd, done = query_gateway, random.Random(7), threading.Event()
    async with aiohttp.ClientSession() as s:
        subscribers = [
            sse_prefix(gw, s, store, "b1/", random.Random(rnd.random()), done),
            sse_prefix(gw, s, store, "", random.Random(rnd.random()), done),
            ws_view(gw, s, store, random.Random(rnd.random()), done),
            sse_window(gw, s, store, 3, None, random.Random(rnd.random()), done),
            sse_window(gw, s, store, 4, (20.0, "p5"), random.Random(rnd.random()), done),
        ]
        tasks = [asyncio.create_task(asyncio.wait_for(c, 120)) for c in subscribers]
        await asyncio.sleep(0.2)
        await asyncio.to_thread(write_randomly, store, 11, done)
        states: list[Any] = list(await asyncio.gather(*tasks))
    prefix_b1, prefix_all, ws_all, top3, page = states
    assert isinstance(prefix_b1, PrefixState) and isinstance(ws_all, PrefixState)
    assert prefix_b1.keys == stored_keys(store, "tasks", "b1/")
    assert isinstance(prefix_all, PrefixState)
    assert prefix_all.keys == ws_all.keys == stored_keys(store, "tasks", "")
    assert isinstance(top3, WindowState) and isinstance(page, WindowState)
    assert top3.ordered() == [r for r, _, _ in stored_window(store, "scores", "g1", 10, 3)]
    assert page.ordered() == [r for r, _, _ in stored_window(store, "scores", "g1", 10, 4,
                                                             (20.0, "p5"))]  # fmt: skip
    # The run exercised what it claims to: deltas after resumes, and resets from trimming.
    assert all(st.deltas > 0 for st in states)
    assert sum(st.resets for st in states) > 0
