"""Fan-out costs that a client can observe: coalesced progress, and what an idle stream keeps.

Progress is sent at most once per ``LV_PROGRESS_INTERVAL_MS`` (always the newest frontier,
never one the subscriber already has). An open SSE stream must not keep its first frames (a
snapshot can be large) alive while it waits: each stream used to hold its snapshot frame, and
with it the JSON encoder's buffer of a few KiB, for as long as it was open.
"""

from __future__ import annotations

import asyncio
import gc

import aiohttp
import redis
from lvclient import ServedGateway, State, Writer, open_sse, run, wait_for

from server import frames


def test_progress_is_coalesced_and_ends_at_the_newest_frontier(
    gateway: ServedGateway, store: redis.Redis, writer: Writer
) -> None:
    async def go() -> None:
        async with aiohttp.ClientSession() as s:
            sse = await open_sse(s, gateway.url + "/v1/views/likes/coalesce/live",
                                 gateway.headers())  # fmt: skip
            assert (await sse.next()).event == "snapshot"
            for i in range(1, 21):
                await asyncio.to_thread(writer.write, [], {0: f"{i}-0"})
            seen = []
            while not seen or seen[-1] != {"0": "20-0"}:
                ev = await sse.next(timeout=5)
                assert ev.event == "progress"
                seen.append(ev.data["frontier"])
            assert len(seen) < 20, "every frontier advance was sent on its own"
            assert len(seen) == len({str(f) for f in seen}), "a frontier was sent twice"
            await sse.heartbeat(timeout=3)  # and nothing more: no frame that changes nothing
            await sse.close()

    run(go())


def _live_snapshots() -> int:
    gc.collect()
    return sum(
        1 for o in gc.get_objects() if isinstance(o, frames.Frame) and o.event == frames.SNAPSHOT
    )


def test_an_open_stream_does_not_keep_its_snapshot(
    gateway: ServedGateway, store: redis.Redis, writer: Writer
) -> None:
    writer.write([("likes", "kept", f"row{i}", {"i": i}) for i in range(50)])

    async def go() -> None:
        async with aiohttp.ClientSession() as s:
            streams = []
            for _ in range(20):
                sse = await open_sse(s, gateway.url + "/v1/views/likes/kept/live",
                                     gateway.headers())  # fmt: skip
                state = State()
                state.apply(await sse.next())
                assert len(state.rows) == 50
                streams.append(sse)
            assert gateway.gateway.metrics.subscriptions >= 20
            await wait_for(lambda: _live_snapshots() == 0, timeout=5)
            for sse in streams:
                await sse.close()

    run(go())
