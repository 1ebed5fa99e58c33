"""While writers run, what subscribers build from their frames equals the stored views.

Deltas go through the real sink from a writer thread; subscribers connect at different times,
and in the randomized test drop their connection at random points and resume from their last
event id. Every delta id is checked: never seen twice, always increasing, and the final rows
equal the store's, so a gap would show as a difference.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import threading
from typing import Any

import aiohttp
import redis

from liveviews.changes.topic import positions_key, shard_for
from tests.support.gateway import ServedGateway, State, Writer, open_sse, position, stored_rows

KEYS = [f"u{i}" for i in range(6)]


def write_randomly(writer: Writer, batches: int, seed: int, stop: threading.Event) -> None:
    rnd = random.Random(seed)
    for b in range(batches):
        if stop.is_set():
            return
        changes: list[tuple[str, str, str, Any]] = []
        for key in rnd.sample(KEYS, rnd.randint(1, 3)):
            for _ in range(rnd.randint(1, 3)):
                row = f"r{rnd.randint(0, 7)}"
                value = None if rnd.random() < 0.25 else {"b": b, "v": rnd.random()}
                changes.append(("likes", key, row, value))
        writer.write(changes, {0: f"{b + 1}-0"})


def last_change(store: redis.Redis, key: str) -> str | None:
    raw = store.hget(positions_key(shard_for("likes", key, 8)), f"likes/{key}")
    return raw.decode() if raw else None


async def read_until_caught_up(sse: Any, state: State, store: redis.Redis, key: str) -> None:
    target = last_change(store, key)
    while target is not None and (
        state.last_id is None or position(state.last_id) < position("x." + target)
    ):
        state.apply(await sse.next(timeout=15))


async def test_concurrent_writers_and_subscribers_agree_with_the_store(
    gateway: ServedGateway, store: redis.Redis, writer: Writer
) -> None:
    stop = threading.Event()

    async def subscriber(s: aiohttp.ClientSession, key: str, delay: float) -> State:
        await asyncio.sleep(delay)
        state = State()
        sse = await open_sse(s, f"{gateway.url}/v1/views/likes/{key}/live", gateway.headers())
        state.apply(await sse.next())
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                state.apply(await sse.next(timeout=0.2))
        await read_until_caught_up(sse, state, store, key)
        await sse.close()
        return state

    async with aiohttp.ClientSession() as s:
        tasks = [asyncio.create_task(subscriber(s, key, delay))
                 for key in KEYS for delay in (0.0, 0.3)]  # fmt: skip
        await asyncio.sleep(0.1)
        await asyncio.to_thread(write_randomly, writer, 250, 1, threading.Event())
        stop.set()
        states = await asyncio.gather(*tasks)
    for (key, _), state in zip([(k, d) for k in KEYS for d in (0, 1)], states, strict=True):
        assert state.rows == stored_rows(store, "likes", key, 8), key
        assert state.resets == 0


async def test_randomized_disconnects_and_resumes_lose_and_repeat_nothing(
    gateway: ServedGateway, store: redis.Redis, writer: Writer
) -> None:
    done = threading.Event()

    async def subscriber(s: aiohttp.ClientSession, n: int) -> tuple[str, State]:
        rnd = random.Random(n)
        key = KEYS[n % len(KEYS)]
        url = f"{gateway.url}/v1/views/likes/{key}/live"
        state = State()
        reconnects = 0
        while not done.is_set() or reconnects < 3:
            headers = gateway.headers()
            if state.last_id is not None:
                headers["Last-Event-ID"] = state.last_id
            sse = await open_sse(s, url, headers)
            for _ in range(rnd.randint(0, 12)):
                try:
                    state.apply(await sse.next(timeout=0.3))
                except TimeoutError:
                    break
            await sse.close()  # drop the connection mid-stream, frames possibly in flight
            reconnects += 1
            await asyncio.sleep(rnd.random() * 0.05)
        headers = {**gateway.headers(), "Last-Event-ID": state.last_id or ""}
        sse = await open_sse(s, url, headers)
        await read_until_caught_up(sse, state, store, key)
        await sse.close()
        return key, state

    async with aiohttp.ClientSession() as s:
        tasks = [asyncio.create_task(subscriber(s, n)) for n in range(24)]
        await asyncio.to_thread(write_randomly, writer, 200, 2, threading.Event())
        done.set()
        results = await asyncio.gather(*tasks)
    for key, state in results:
        assert state.resets == 0
        assert state.rows == stored_rows(store, "likes", key, 8), key
