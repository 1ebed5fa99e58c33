"""Query-shaped subscriptions under random writes, reconnects, resets and replayed batches.

A writer thread writes random batches through the real sink, replaying some (as a pipeline
restarted after a crash does: the sink applies a batch once) and with a change-topic retention
small enough that a subscriber away for long finds its history trimmed (a reset). Subscribers of
a prefix, of the whole view and of windows drop their connection at random points and resume
from their last event id. Every delta is checked as it comes (never twice, a key's in order),
and once the writer stops each subscriber's state must equal the store's: a gap would show as a
difference. Prefix subscribers, some with random filters (docs/PROTOCOL.md, section 5.2), are
also checked at every snapshot and progress frame: what they hold then must equal the view as
the writer left it at that frame's frontier, filtered.
"""

from __future__ import annotations

import asyncio
import json
import random
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import aiohttp
import orjson
import redis

from liveviews.gateway.wire import filters
from liveviews.pipeline.sink import ChangeTopicSink
from tests.server.query.support import PrefixState, Socket, WindowState, stored_keys, stored_window
from tests.support.gateway import ServedGateway, open_sse
from tests.support.gateway_settings import SHARDS

TASKS = [f"b{b}/t{t}" for b in range(3) for t in range(6)]
PLAYERS = [f"p{i}" for i in range(12)]
RETENTION = 60
OWNERS = ["ada", "grace", None]
BATCHES = 300
VIEW_LIMIT = 10


Tasks = dict[str, dict[str, Any]]


def write_randomly(
    store: redis.Redis, seed: int, done: threading.Event, truth: dict[int, Tasks]
) -> None:
    """Random batches; ``truth[batch]``: the tasks once that batch is written, recorded before
    the batch is, so that a subscriber that sees its frontier finds it."""
    from tests.support.queryapp import app

    rnd = random.Random(seed)
    sink = ChangeTopicSink(store, app, "queries", SHARDS, RETENTION)
    tasks: Tasks = {}
    truth[0] = {}
    try:
        for batch in range(1, BATCHES + 1):
            rows = []
            for key in rnd.sample(TASKS, rnd.randint(1, 3)):
                value: dict[str, Any] | None = None
                if rnd.random() >= 0.2:
                    value = {"title": f"{key} #{batch}", "owner": rnd.choice(OWNERS),
                             "size": rnd.randint(0, 9)}  # fmt: skip
                rows.append(_row("tasks", key, "task", value, 0.0))
                if value is None:
                    tasks.pop(key, None)
                else:
                    tasks[key] = {"task": value}
            truth[batch] = {k: dict(rows) for k, rows in tasks.items()}
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


class CheckedPrefix(PrefixState):
    """A prefix subscriber's state, checked against ``truth`` at each frame with a frontier."""

    def __init__(self, truth: dict[int, Tasks], prefix: str, where: Any = None) -> None:
        super().__init__()
        self.truth = truth
        self.prefix = prefix
        self.where = None if where is None else filters.parse(where)
        self.checked = 0

    def expected(self, batch: int) -> Tasks:
        out = {}
        for key, rows in self.truth[batch].items():
            kept = {r: v for r, v in rows.items() if self.where is None or self.where.matches(v)}
            if key.startswith(self.prefix) and kept:
                out[key] = kept
        return out

    def apply(self, event: str, event_id: str | None, data: dict[str, Any]) -> None:
        super().apply(event, event_id, data)
        if event in ("snapshot", "progress"):
            frontier = int(data["frontier"].get("0", "0-0").split("-")[0])
            # Each key as the view held it at the frontier or later: the deltas of the
            # frontier's batches are all in, and a later batch's may be too.
            later = [self.expected(b) for b in range(frontier, max(self.truth) + 1)]
            for key in set(self.keys).union(*later):
                assert any(self.keys.get(key) == view.get(key) for view in later), (
                    f"{key} at the {event} of batch {frontier} (of {max(self.truth)}) of prefix "
                    f"{self.prefix!r} {self.where and self.where.canonical}: {self.keys.get(key)}"
                    f" after {self.resets} resets, {self.deltas} deltas, {self.checked} checks;"
                    f" then {[view.get(key) for view in later]}"
                )
            self.checked += 1


State = TypeVar("State", PrefixState, WindowState)


async def resuming_sse(
    gw: ServedGateway, s: aiohttp.ClientSession, url: str, params: dict[str, str],
    state: State, agrees: Callable[[], bool], rnd: random.Random, done: threading.Event,
) -> State:  # fmt: skip
    """Read a stream into ``state`` a few frames at a time, away a moment after each, resuming
    from its last event id, until the writer is done and ``agrees()``. Progress frames are
    read only by a state that checks them."""
    skip = () if isinstance(state, CheckedPrefix) else ("progress",)
    while True:
        headers = gw.headers() | ({"Last-Event-ID": state.last_id} if state.last_id else {})
        sse = await open_sse(s, url, headers, params)
        budget = rnd.randint(1, 12)
        while budget > 0 and not (done.is_set() and agrees()):
            try:
                state.take(await sse.next(timeout=0.3, skip=skip))
            except TimeoutError:
                continue
            budget -= 1
        await sse.close()
        if done.is_set() and agrees():
            return state
        await asyncio.sleep(rnd.random() * 0.2)  # away while deltas come


async def sse_prefix(
    gw: ServedGateway, s: aiohttp.ClientSession, store: redis.Redis, prefix: str,
    rnd: random.Random, done: threading.Event, truth: dict[int, Tasks], where: Any = None,
) -> PrefixState:  # fmt: skip
    state = CheckedPrefix(truth, prefix, where)

    def agrees() -> bool:
        return state.keys == filtered(stored_keys(store, "tasks", prefix), state)

    params = {"view": "tasks", "prefix": prefix}
    if where is not None:
        params["filter"] = json.dumps(where)
    return await resuming_sse(gw, s, f"{gw.url}/v1/live", params, state, agrees, rnd, done)


def filtered(keys: Tasks, state: CheckedPrefix) -> Tasks:
    if state.where is None:
        return keys
    out = {}
    for key, rows in keys.items():
        kept = {r: v for r, v in rows.items() if state.where.matches(v)}
        if kept:
            out[key] = kept
    return out


async def ws_view(
    gw: ServedGateway, s: aiohttp.ClientSession, store: redis.Redis, rnd: random.Random,
    done: threading.Event, truth: dict[int, Tasks], where: Any = None,
) -> PrefixState:  # fmt: skip
    state = CheckedPrefix(truth, "", where)
    ws = Socket(await s.ws_connect(gw.ws_url, headers=gw.headers()))
    n = 0
    while True:
        n += 1
        sub = f"all{n}"
        await ws.send(type="subscribe", sub=sub, view="tasks", prefix="",
                      **({"last_event_id": state.last_id} if state.last_id else {}),
                      **({"filter": where} if where is not None else {}))  # fmt: skip
        budget = rnd.randint(1, 12)

        def agrees() -> bool:
            return state.keys == filtered(stored_keys(store, "tasks", ""), state)

        while budget > 0 and not (done.is_set() and agrees()):
            try:
                m = await asyncio.wait_for(ws.next(skip=("heartbeat", "authenticated")), 0.3)
            except TimeoutError:
                continue
            assert m.get("sub") == sub, m
            state.apply(m["type"], m.get("id"), m["data"])
            budget -= 1
        await ws.send(type="unsubscribe", sub=sub)
        while (m := await ws.next(skip=("heartbeat",)))["type"] != "unsubscribed":
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


def random_filter(rnd: random.Random, depth: int = 0) -> dict[str, Any]:
    """A filter on the tasks' owner and size, of the grammar's every form."""
    if depth < 2 and rnd.random() < 0.5:
        form = rnd.choice(["and", "or", "not"])
        if form == "not":
            return {"not": random_filter(rnd, depth + 1)}
        return {form: [random_filter(rnd, depth + 1) for _ in range(rnd.randint(1, 3))]}
    return rnd.choice([
        {"field": "owner", "eq": rnd.choice(["ada", "grace"])},
        {"field": "owner", "ne": "ada"},
        {"field": "owner", "in": ["ada", "grace"]},
        {"field": "owner", "null": rnd.random() < 0.5},
        {"field": "size", rnd.choice(["lt", "lte", "gt", "gte"]): rnd.randint(0, 9)},
        {"field": "size", "in": rnd.sample(range(10), 3)},
    ])  # fmt: skip


async def test_query_subscriptions_resume_with_no_gap_and_no_duplicate(
    query_gateway: ServedGateway, store: redis.Redis
) -> None:
    gw, rnd, done = query_gateway, random.Random(7), threading.Event()
    truth: dict[int, Tasks] = {0: {}}
    wheres = [random_filter(rnd) for _ in range(3)]
    async with aiohttp.ClientSession() as s:
        subscribers = [
            sse_prefix(gw, s, store, "b1/", random.Random(rnd.random()), done, truth),
            sse_prefix(gw, s, store, "", random.Random(rnd.random()), done, truth),
            ws_view(gw, s, store, random.Random(rnd.random()), done, truth),
            sse_window(gw, s, store, 3, None, random.Random(rnd.random()), done),
            sse_window(gw, s, store, 4, (20.0, "p5"), random.Random(rnd.random()), done),
            sse_prefix(gw, s, store, "b1/", random.Random(rnd.random()), done, truth, wheres[0]),
            sse_prefix(gw, s, store, "", random.Random(rnd.random()), done, truth, wheres[1]),
            ws_view(gw, s, store, random.Random(rnd.random()), done, truth, wheres[2]),
        ]
        tasks = [asyncio.create_task(asyncio.wait_for(c, 120)) for c in subscribers]
        await asyncio.sleep(0.2)
        await asyncio.to_thread(write_randomly, store, 11, done, truth)
        states: list[Any] = list(await asyncio.gather(*tasks))
    prefix_b1, prefix_all, ws_all, top3, page, *wanted = states
    assert isinstance(prefix_b1, PrefixState) and isinstance(ws_all, PrefixState)
    assert prefix_b1.keys == stored_keys(store, "tasks", "b1/")
    assert isinstance(prefix_all, PrefixState)
    assert prefix_all.keys == ws_all.keys == stored_keys(store, "tasks", "")
    assert isinstance(top3, WindowState) and isinstance(page, WindowState)
    assert top3.ordered() == [r for r, _, _ in stored_window(store, "scores", "g1", 10, 3)]
    assert page.ordered() == [r for r, _, _ in stored_window(store, "scores", "g1", 10, 4,
                                                             (20.0, "p5"))]  # fmt: skip
    for state in wanted:
        assert state.keys == filtered(stored_keys(store, "tasks", state.prefix), state)
    # The run exercised what it claims to: deltas after resumes, resets from trimming, and the
    # check of what each prefix subscriber held at its frontiers.
    assert all(st.deltas > 0 for st in states), [st.deltas for st in states]
    assert sum(st.resets for st in states) > 0
    checks = [(st.checked, st.deltas) for st in states if isinstance(st, CheckedPrefix)]
    assert all(checked > 0 and deltas > 0 for checked, deltas in checks), checks
    assert sum(checked for checked, _ in checks) >= 20, checks
