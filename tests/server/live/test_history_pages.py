"""A resume reads the deltas it missed a page at a time, under the rules live deltas follow.

Bug: a resume from an old ``last_event_id`` read every missed delta of the retained shard at
once and wrote them all without the slow-consumer rule, however little the client read; a
WebSocket client repeating subscribe/unsubscribe multiplied that by the number of messages it
sent. Fix: history comes in pages of at most the subscriber buffer, each read and written only
once the client has taken everything before it; a client that has not within the send timeout
is a slow consumer; the store reads of one socket's subscriptions take turns. The resume
guarantees stay: every missed delta once, in order, then the live ones.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import socket
import time
from collections.abc import Iterator
from typing import Any

import aiohttp
import orjson
import pytest
import redis

from tests.support.gateway import ServedGateway, State, Writer, open_sse, stored_rows, wait_for
from tests.support.gateway_settings import SHARDS, settings_for

BUFFER = 16
SEND_TIMEOUT = 2.0
DELTAS = 300
PAD = 40_000
"""Each missed delta is ~40 kB: the whole history is ~12 MB, more than the kernel's socket
buffers take (up to 4 MB on the test machine), a page ~640 kB."""


@pytest.fixture(scope="module")
def paged(store_url: str) -> Iterator[ServedGateway]:
    served = ServedGateway(settings_for(
        store_url, LV_SUBSCRIBER_BUFFER=str(BUFFER), LV_SEND_TIMEOUT_SECONDS=str(SEND_TIMEOUT),
        LV_MAX_SUBSCRIPTIONS_PER_SOCKET="100",
    )).start()  # fmt: skip
    yield served
    served.stop()


async def history(gw: ServedGateway, writer: Writer, key: str, n: int = DELTAS) -> str:
    """Write ``n`` deltas of likes/``key``; the event id of the position before them."""
    async with aiohttp.ClientSession() as s:
        r = await s.get(f"{gw.url}/v1/views/likes/{key}", headers=gw.headers())
        before = str((await r.json())["position"])
    for i in range(n):
        writer.write([("likes", key, "row", {"n": i, "pad": "x" * PAD})])
    return before


def unsent_peak(gw: ServedGateway, seconds: float) -> int:
    """The most bytes the gateway held unsent for all its client connections at once, sampled
    over ``seconds``."""

    def unsent() -> int:
        total = 0
        for c in gw.server.server_state.connections:
            transport = getattr(c, "transport", None)
            if transport is not None and not transport.is_closing():
                total += transport.get_write_buffer_size()
        return total

    peak, until = 0, time.monotonic() + seconds
    while time.monotonic() < until:
        peak = max(peak, gw.in_loop(unsent))
        time.sleep(0.02)
    return peak


def quiet_socket(gw: ServedGateway) -> socket.socket:
    """A client socket that will read nothing: a small receive window, never read."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(("127.0.0.1", gw.settings.port))
    return s


async def test_a_resume_to_a_client_that_does_not_read_is_written_a_page_at_a_time(
    paged: ServedGateway, store: redis.Redis, writer: Writer
) -> None:
    before = await history(paged, writer, "quiet")
    metrics = paged.gateway.metrics
    slow0 = metrics.slow_consumers
    s = quiet_socket(paged)
    s.sendall(f"GET /v1/views/likes/quiet/live HTTP/1.1\r\nHost: gw\r\n"
              f"Authorization: Bearer {paged.token('alice')}\r\nLast-Event-ID: {before}\r\n"
              "\r\n".encode())  # fmt: skip
    peak = await asyncio.to_thread(unsent_peak, paged, SEND_TIMEOUT)
    history_bytes = DELTAS * PAD
    print(f"\n[resume-quiet] history_bytes={history_bytes} unsent_peak={peak}")
    assert peak < history_bytes / 4, (peak, history_bytes)
    # Ended as a slow consumer once a page waited the send timeout; nothing else ends it.
    await wait_for(lambda: metrics.slow_consumers > slow0, timeout=3 * SEND_TIMEOUT)
    await wait_for(lambda: metrics.sse_connections == 0, timeout=3 * SEND_TIMEOUT)
    s.close()


async def test_a_resume_far_behind_gets_every_delta_once_in_order_then_the_live_ones(
    paged: ServedGateway, store: redis.Redis, writer: Writer
) -> None:
    before = await history(paged, writer, "busy", n=5 * BUFFER + 3)
    state = State()
    async with aiohttp.ClientSession() as s:
        sse = await open_sse(s, f"{paged.url}/v1/views/likes/busy/live",
                             {**paged.headers(), "Last-Event-ID": before})  # fmt: skip
        for i in range(5):  # live deltas while it reads its pages
            writer.write([("likes", "busy", "row", {"n": f"live{i}"})])
            state.apply(await sse.next(skip=("progress",)))
        while len(state.ids) < 5 * BUFFER + 3 + 5:
            state.apply(await sse.next(skip=("progress",)))
        await sse.close()
    assert state.resets == 0
    assert state.rows == stored_rows(store, "likes", "busy", SHARDS)
    assert state.rows["row"]["n"] == "live4"


def ws_handshake(s: socket.socket, gw: ServedGateway) -> None:
    key = base64.b64encode(os.urandom(16)).decode()
    s.sendall(f"GET /v1/ws?access_token={gw.token('alice')} HTTP/1.1\r\nHost: gw\r\n"
              "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
              f"Sec-WebSocket-Key: {key}\r\n\r\n".encode())  # fmt: skip
    s.settimeout(10)
    assert s.recv(4096).startswith(b"HTTP/1.1 101")


def frame(msg: dict[str, Any]) -> bytes:
    payload = orjson.dumps(msg)
    mask = b"\x01\x02\x03\x04"
    n = len(payload)
    head = bytes([0x81, 0x80 | n]) if n < 126 else bytes([0x81, 0x80 | 126]) + n.to_bytes(2, "big")
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


def xranges(store: redis.Redis) -> int:
    stats: dict[str, Any] = store.info("commandstats")  # type: ignore[assignment]
    return int(stats.get("cmdstat_xrange", {}).get("calls", 0))


async def test_subscribe_and_unsubscribe_in_a_loop_cannot_multiply_history_reads(
    paged: ServedGateway, store: redis.Redis, writer: Writer
) -> None:
    """Each subscribe from an old id used to read and write the whole history at once, all
    of them side by side: rounds of 8 subscribes cost 8 times the history each."""
    before = await history(paged, writer, "looped")
    metrics = paged.gateway.metrics
    reads0, out0 = xranges(store), metrics.bytes_out
    s = quiet_socket(paged)
    ws_handshake(s, paged)
    rounds, subs = 2, 8
    peak = 0
    for r in range(rounds):
        names = [f"s{r}-{i}" for i in range(subs)]
        s.sendall(b"".join(frame({"type": "subscribe", "sub": n, "view": "likes", "key": "looped",
                                  "last_event_id": before}) for n in names))  # fmt: skip
        peak = max(peak, await asyncio.to_thread(unsent_peak, paged, 0.5))
        s.sendall(b"".join(frame({"type": "unsubscribe", "sub": n}) for n in names))
    peak = max(peak, await asyncio.to_thread(unsent_peak, paged, 0.5))
    reads, written = xranges(store) - reads0, metrics.bytes_out - out0
    s.close()
    await wait_for(lambda: metrics.ws_connections == 0, timeout=4 * SEND_TIMEOUT)
    history_bytes = DELTAS * PAD
    print(
        f"\n[resume-loop] history_bytes={history_bytes} unsent_peak={peak} written={written} "
        f"xrange_calls={reads} subscribes={rounds * subs}"
    )
    assert peak < history_bytes / 4, peak
    # What the socket's buffers took, a page at a time, and not a history per subscribe.
    assert written < history_bytes, (written, history_bytes)
    assert reads < rounds * subs, reads


async def test_a_client_that_sends_and_never_reads_is_cut_off_by_the_buffer_rule(
    store_url: str,
) -> None:
    """With a send timeout of a minute, the socket is closed within seconds, its unsent
    answers never more than the subscriber buffer's worth."""
    served = ServedGateway(settings_for(
        store_url, LV_SUBSCRIBER_BUFFER=str(BUFFER), LV_SEND_TIMEOUT_SECONDS="60",
        LV_HEARTBEAT_SECONDS="60",
    )).start()  # fmt: skip
    try:
        s = quiet_socket(served)
        ws_handshake(s, served)
        garbage = frame({"type": "explode", "pad": "x" * 50}) * 50_000  # 4 MB of bad messages
        sender = asyncio.create_task(asyncio.to_thread(_send_quietly, s, garbage))
        peak = await asyncio.to_thread(unsent_peak, served, 3.0)

        def closing() -> list[bool]:
            return [c.closing for c in served.server.server_state.connections
                    if type(c).__name__ == "OwnedSocket"]  # fmt: skip

        still = served.in_loop(closing)
        s.close()
        await sender
        print(f"\n[send-never-read] unsent_peak={peak} open_sockets_closing={still}")
        assert still in ([], [True]), still
        assert peak < 64 * 1024, peak
    finally:
        served.stop()


def _send_quietly(s: socket.socket, data: bytes) -> None:
    s.settimeout(5)
    with contextlib.suppress(OSError):  # cut off, or blocked by a gateway that stopped reading
        s.sendall(data)
