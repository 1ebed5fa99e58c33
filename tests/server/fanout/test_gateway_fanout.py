"""Fan-out costs that a client can observe: coalesced progress, what an idle stream keeps, and
one write for the deltas of a key that the gateway reads together.

Progress is sent at most once per ``LV_PROGRESS_INTERVAL_MS`` (always the newest frontier,
never one the subscriber already has). An open SSE stream must not keep its first frames (a
snapshot can be large) alive while it waits: each stream used to hold its snapshot frame, and
with it the JSON encoder's buffer of a few KiB, for as long as it was open.
"""

from __future__ import annotations

import asyncio
import gc
import time
from typing import Any

import aiohttp
import pytest
import redis

from liveviews.gateway.live import sse as live_sse
from liveviews.gateway.live import writes as live_writes
from liveviews.gateway.wire import frames
from tests.support.gateway import ServedGateway, State, Writer, open_sse, wait_for


async def test_progress_is_coalesced_and_ends_at_the_newest_frontier(
    gateway: ServedGateway, store: redis.Redis, writer: Writer
) -> None:
    async with aiohttp.ClientSession() as s:
        sse = await open_sse(s, gateway.url + "/v1/views/likes/coalesce/live",
                             gateway.headers())  # fmt: skip
        assert (await sse.next()).event == "snapshot"
        for i in range(1, 21):
            await asyncio.to_thread(writer.write, [], {0: f"{i}-0"})
        seen = []
        while not seen or seen[-1] != {"0": "20-0"}:
            ev = await sse.next(timeout=10)  # a key that did not change: the quiet rhythm, 5 s
            assert ev.event == "progress"
            seen.append(ev.data["frontier"])
        assert len(seen) < 20, "every frontier advance was sent on its own"
        assert len(seen) == len({str(f) for f in seen}), "a frontier was sent twice"
        await sse.heartbeat(timeout=3)  # and nothing more: no frame that changes nothing
        await sse.close()


def _live_snapshots() -> int:
    gc.collect()
    return sum(
        1 for o in gc.get_objects() if isinstance(o, frames.Frame) and o.event == frames.SNAPSHOT
    )


async def test_an_open_stream_does_not_keep_its_snapshot(
    gateway: ServedGateway, store: redis.Redis, writer: Writer
) -> None:
    writer.write([("likes", "kept", f"row{i}", {"i": i}) for i in range(50)])

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


async def _http_chunk(resp: aiohttp.ClientResponse) -> bytes:
    """The next whole HTTP/1.1 chunk of ``resp``'s body."""
    out = b""
    while True:
        data, end_of_chunk = await asyncio.wait_for(resp.content.readchunk(), 5)
        out += data
        if end_of_chunk:
            return out


async def test_a_due_frontier_rides_in_the_same_write_as_the_delta_it_covers(
    gateway: ServedGateway, store: redis.Redis, writer: Writer
) -> None:
    """A delta and the frontier that covers it, read together, go out as one chunk (one write,
    one system call per subscriber), delta first."""

    async with aiohttp.ClientSession() as s:
        url = gateway.url + "/v1/views/likes/ride/live"
        async with s.get(url, headers=gateway.headers()) as resp:
            assert b"event: snapshot" in await _http_chunk(resp)
            await asyncio.sleep(0.4)  # past the progress interval: the frontier is due
            offset = f"{time.time_ns() // 1_000_000}-0"
            await asyncio.to_thread(writer.write, [("likes", "ride", "r", {"n": 1})],
                                    {0: offset})  # fmt: skip
            chunk = await _http_chunk(resp)
            assert b"event: delta" in chunk and b"event: progress" in chunk, chunk
            assert chunk.index(b"event: delta") < chunk.index(b"event: progress")
            assert offset.encode() in chunk


async def test_a_keys_deltas_read_together_reach_each_stream_and_socket_in_one_write(
    gateway: ServedGateway, writer: Writer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A gateway that falls behind reads several deltas of a key at once; each subscriber then
    gets them in order, in one system call (they share one chunk over SSE)."""
    writes: list[bytes] = []
    os_write = live_writes._os_write

    def noting(fd: int, data: bytes) -> int:
        writes.append(bytes(data))
        return os_write(fd, data)

    def names(ops: list[dict[str, Any]]) -> list[str]:
        return [op["value"]["name"] for op in ops]

    async with aiohttp.ClientSession() as s:
        sse = await open_sse(s, gateway.url + "/v1/views/profiles/runs/live",
                             gateway.headers())  # fmt: skip
        assert (await sse.next()).event == "snapshot"
        ws = await s.ws_connect(f"{gateway.ws_url}?access_token={gateway.token('alice')}")
        await ws.send_json({"type": "subscribe", "sub": "r", "view": "profiles", "key": "runs"})
        while (await ws.receive_json(timeout=10))["type"] != "snapshot":
            pass
        # Every write to a socket: a stream's own, or its cohort's (liveviews.gateway.live.sse.group_write).
        monkeypatch.setattr(live_writes, "_os_write", noting)
        monkeypatch.setattr(live_sse, "_os_write", noting)
        # Both batches land while the gateway's loop is held: its feed reads them together.
        gateway.in_loop(lambda: [writer.write([("profiles", "runs", "profile", {"name": n})])
                                 for n in ("first", "second")])  # fmt: skip
        got = [await sse.next(skip=("progress",)) for _ in range(2)]
        assert [e.event for e in got] == ["delta", "delta"]
        assert [names(e.data["ops"]) for e in got] == [["first"], ["second"]]
        messages: list[dict[str, Any]] = []
        while len(messages) < 2:
            m = await ws.receive_json(timeout=10)
            if m["type"] == "delta":
                messages.append(m)
        assert [names(m["data"]["ops"]) for m in messages] == [["first"], ["second"]]
        await ws.close()
        await sse.close()
    together = [w for w in writes if b'"first"' in w and b'"second"' in w]
    assert any(b"event: delta" in w for w in together), "SSE: the deltas in writes of their own"
    assert any(w[0] == 0x81 for w in together), "WebSocket: the deltas in writes of their own"
