"""Slow and hostile clients against a real gateway process, with a well-behaved subscriber
watching throughout.

Each test runs a reference SSE subscriber on the key the hostile clients load, measures its
delivery latency, and reads the gateway's RSS and open file descriptors from /proc. The
figures are printed (``pytest -s``); docs/reliability/hostile.md records them.

``LV_HOSTILE_N`` scales the number of hostile clients (default: CI size).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest
import redis

from tests.faults.hostile_support import (
    Behaved,
    BlackHoleProxy,
    DeltaPump,
    GatewayProcess,
    hostile_n,
    open_ws,
    percentile,
    raise_nofile,
    raw_socket,
    reference_running,
    sse_request,
    token,
    wait_until,
    ws_frame,
    ws_request,
)

N = hostile_n(20)
SEND_TIMEOUT = 2.0
HEARTBEAT = 1.0
HEADER_TIMEOUT = 2.0
MAX_SUBS = 20
MAX_CONNECTIONS = 4 * N + 20
MAX_BODY = 65_536
RATE = 40
PAD = 32_000
CONNECTION_BUDGET = 256 * 1024
"""Generous RSS allowance per hostile connection: buffers, frames, task and protocol state."""
SLACK = 48 * 1024 * 1024
POOL = 64
"""The gateway's store connections may grow up to liveviews.gateway.feed.store.MAX_STORE_CONNECTIONS."""
HALF_OPEN_SSE = 4
UNAUTHENTICATED = 256
"""The default ``LV_MAX_UNAUTHENTICATED``."""
TINY_FRAMES = 1_000_000
"""6-byte pings, 6 MB: seconds of the event loop at the old parser's speed."""
P99_BOUND = 1.0 * max(1.0, N / 100)
"""Seconds; hostile clients that never read take a burst of writes each until they are cut off,
and the machine has two cores, so bigger runs get a proportionally looser bound."""


@pytest.fixture(scope="module")
def gw(store_url: str) -> Iterator[GatewayProcess]:
    raise_nofile()
    process = GatewayProcess(
        store_url,
        LV_SUBSCRIBER_BUFFER="64",
        LV_SEND_TIMEOUT_SECONDS=str(SEND_TIMEOUT),
        LV_HEARTBEAT_SECONDS=str(HEARTBEAT),
        LV_HEADER_TIMEOUT_SECONDS=str(HEADER_TIMEOUT),
        LV_MAX_SUBSCRIPTIONS_PER_SOCKET=str(MAX_SUBS),
        LV_MAX_CONNECTIONS=str(MAX_CONNECTIONS),
        # One user's token opens every stream of the process-limit test: its own cap would
        # refuse them first (tests/server/test_admission.py tests that cap).
        LV_MAX_CONNECTIONS_PER_SUBJECT=str(MAX_CONNECTIONS),
        LV_MAX_BODY_BYTES=str(MAX_BODY),
        LV_WS_AUTH_TIMEOUT_SECONDS="2",
    ).start()
    yield process
    process.stop()
    print("".join(process.log[-80:]))


@pytest.fixture()
def fresh(gw: GatewayProcess, store: redis.Redis) -> GatewayProcess:
    """The gateway over a flushed store, once its change feed has read the new epoch."""
    wait_until(lambda: gw.metric("lv_connections") == 0, 15 + N / 10)
    return gw


def report(name: str, **figures: Any) -> None:
    print(f"\n[{name}] " + " ".join(f"{k}={v}" for k, v in figures.items()))


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f}ms"


def measure_baseline(ref: Any, seconds: float = 3.0) -> list[float]:
    wait_until(lambda: len(ref.latencies) > 5, 15)
    mark = ref.mark()
    time.sleep(seconds)
    return list(ref.since(mark))


def test_subscribers_that_never_read_are_cut_off_and_memory_stays_bounded(
    fresh: GatewayProcess, store_url: str
) -> None:
    gw = fresh
    with DeltaPump(store_url, ["hot"], RATE, PAD), \
            reference_running(gw.url + "/v1/views/likes/hot/live") as ref:  # fmt: skip
        quiet = measure_baseline(ref)
        log_mark = len(gw.log)
        rss0, fds0, socks0 = gw.rss(), gw.fds(), gw.sockets()
        slow0 = gw.metric("lv_slow_consumer_total")
        mark = ref.mark()
        hostile: list[socket.socket] = []
        for _ in range(N):
            s = raw_socket(gw.port)
            s.sendall(sse_request("likes", "hot"))
            hostile.append(s)
            hostile.append(open_ws(gw.port, ("h", "likes", "hot")))
        peak_rss, peak_fds = rss0, fds0

        def all_cut_off() -> bool:
            nonlocal peak_rss, peak_fds
            peak_rss, peak_fds = max(peak_rss, gw.rss()), max(peak_fds, gw.fds())
            return gw.metric("lv_connections") <= 1 and gw.sockets() <= socks0

        took = wait_until(all_cut_off, 30 + SEND_TIMEOUT, 0.2)
        attacked = ref.since(mark)
        rss1, fds1, socks1 = gw.rss(), gw.fds(), gw.sockets()
        slow = gw.metric("lv_slow_consumer_total") - slow0
        for s in hostile:
            s.close()
    report("never-read", clients=2 * N, cut_off_s=f"{took:.1f}", slow_consumers=slow,
           rss_before_mib=rss0 >> 20, rss_peak_mib=peak_rss >> 20, rss_after_mib=rss1 >> 20,
           fds_before=fds0, fds_peak=peak_fds, fds_after=fds1, sockets_after=socks1,
           p50_quiet=ms(percentile(quiet, 50)), p99_quiet=ms(percentile(quiet, 99)),
           p50_attack=ms(percentile(attacked, 50)), p99_attack=ms(percentile(attacked, 99)),
           deliveries_attack=len(attacked))  # fmt: skip
    # SSE streams are ended by the slow-consumer rule; a WebSocket that never reads may be
    # closed by its ping timeout first, whichever comes first.
    assert slow >= N
    assert peak_rss - rss0 < 2 * N * CONNECTION_BUDGET + SLACK
    assert socks1 <= socks0 and fds1 <= fds0 + POOL
    # A socket closed on a send timeout is not written to again (it used to raise out of the
    # endpoint with a traceback for every such client).
    assert not [line for line in gw.log[log_mark:] if "once a close message" in line]
    assert len(attacked) >= RATE, "the reference subscriber kept receiving"
    assert percentile(attacked, 99) < P99_BOUND


def test_one_client_opening_thousands_of_subscriptions_meets_the_limits(
    fresh: GatewayProcess, store_url: str
) -> None:
    gw = fresh
    attempts = MAX_CONNECTIONS + 2 * N
    floods = 50 * N

    async def attack() -> tuple[dict[int, int], list[str], dict[str, int]]:
        conn = aiohttp.TCPConnector(limit=0)
        headers = {"Authorization": f"Bearer {token()}"}
        async with aiohttp.ClientSession(connector=conn) as s:
            statuses: dict[int, int] = {}
            codes: list[str] = []
            held = []
            for i in range(attempts):
                r = await s.get(f"{gw.url}/v1/views/likes/k{i % 50}/live", headers=headers)
                statuses[r.status] = statuses.get(r.status, 0) + 1
                if r.status == 200:
                    held.append(r)
                else:
                    codes.append((await r.json())["code"])
                    r.release()
            peak = gw.rss()
            for r in held:
                r.close()
            await asyncio.to_thread(wait_until, lambda: gw.metric("lv_connections") <= 1, 15)
            ws = await s.ws_connect(gw.ws_url, params={"access_token": token()})
            assert json.loads((await ws.receive()).data)["type"] == "authenticated"
            for i in range(floods):
                await ws.send_str(json.dumps({"type": "subscribe", "sub": f"s{i}",
                                              "view": "likes", "key": f"k{i % 50}"}))  # fmt: skip
            answers: dict[str, int] = {}
            while sum(answers.values()) < floods:
                m = json.loads((await asyncio.wait_for(ws.receive(), 15)).data)
                kind = m.get("code") or m["type"]
                if kind not in ("heartbeat", "progress"):
                    answers[kind] = answers.get(kind, 0) + 1
            await ws.close()
            answers["rss_peak"] = max(peak, gw.rss())
            return statuses, codes, answers

    with DeltaPump(store_url, ["hot"], RATE), \
            reference_running(gw.url + "/v1/views/likes/hot/live") as ref:  # fmt: skip
        wait_until(lambda: len(ref.latencies) > 5, 15)
        rss0, fds0, socks0 = gw.rss(), gw.fds(), gw.sockets()
        mark = ref.mark()
        statuses, codes, answers = asyncio.run(attack())
        attacked = ref.since(mark)
        wait_until(lambda: gw.sockets() <= socks0, 10)
        fds1, socks1 = gw.fds(), gw.sockets()
    peak = answers.pop("rss_peak")
    report("thousands", sse_attempts=attempts, statuses=statuses, ws_subscribes=floods,
           ws_answers=answers, rss_before_mib=rss0 >> 20, rss_peak_mib=peak >> 20,
           fds_before=fds0, fds_after=fds1, sockets_after=socks1,
           p99_attack=ms(percentile(attacked, 99)))  # fmt: skip
    admitted = MAX_CONNECTIONS - 1  # the reference holds one connection
    assert statuses == {200: admitted, 503: attempts - admitted}
    assert set(codes) == {"too_many_connections"}
    assert answers == {"snapshot": MAX_SUBS, "too_many_subscriptions": floods - MAX_SUBS}
    assert peak - rss0 < attempts * CONNECTION_BUDGET + SLACK
    assert socks1 <= socks0 and fds1 <= fds0 + POOL
    assert percentile(attacked, 99) < P99_BOUND


async def ws_next(ws: aiohttp.ClientWebSocketResponse, timeout: float = 10) -> dict[str, Any]:
    while True:
        m = await asyncio.wait_for(ws.receive(), timeout)
        if m.type != aiohttp.WSMsgType.TEXT:
            return {"type": "closed", "code": ws.close_code}
        msg: dict[str, Any] = json.loads(m.data)
        if msg["type"] not in ("heartbeat", "progress"):
            return msg


def test_garbage_over_websocket_gets_error_frames_and_close_codes(
    fresh: GatewayProcess, store_url: str
) -> None:
    gw = fresh

    async def garbage() -> dict[str, Any]:
        seen: dict[str, Any] = {}
        async with aiohttp.ClientSession() as s:
            ws = await s.ws_connect(gw.ws_url, params={"access_token": token()}, max_msg_size=0)
            assert (await ws_next(ws))["type"] == "authenticated"
            for name, send in [
                ("not_json", ws.send_str("{not json")),
                ("not_object", ws.send_str("[1, 2]")),
                ("binary", ws.send_bytes(b"\xff\xfe\x00garbage")),
                ("unknown_op", ws.send_str(json.dumps({"type": "explode"}))),
                ("no_type", ws.send_str(json.dumps({"sub": "a"}))),
            ]:
                await send
                seen[name] = await ws_next(ws)
            # The socket still serves after all that.
            await ws.send_str(json.dumps({"type": "subscribe", "sub": "ok", "view": "likes",
                                          "key": "hot"}))  # fmt: skip
            seen["after"] = await ws_next(ws)
            await ws.close()

            ws = await s.ws_connect(gw.ws_url, params={"access_token": token()})
            await ws_next(ws)
            await ws.send_str(json.dumps({"type": "publish", "req": "r", "events": [],
                                          "pad": "x" * (MAX_BODY + 1)}))  # fmt: skip
            seen["huge"] = await ws_next(ws)
            # One frame announcing 2**40 bytes: refused on its header, nothing is buffered.
            ws = await s.ws_connect(gw.ws_url, params={"access_token": token()})
            await ws_next(ws)
            writer = ws._writer  # noqa: SLF001 - a hostile peer writes the raw frame header
            writer.transport.write(bytes([0x81, 0xFF]) + (2**40).to_bytes(8, "big") + b"\0" * 4)
            seen["announced"] = await ws_next(ws)
        return seen

    with DeltaPump(store_url, ["hot"], RATE), \
            reference_running(gw.url + "/v1/views/likes/hot/live") as ref:  # fmt: skip
        wait_until(lambda: len(ref.latencies) > 5, 15)
        rss0 = gw.rss()
        mark = ref.mark()
        seen = asyncio.run(garbage())
        wait_until(lambda: len(ref.since(mark)) > 5, 10)
        attacked = ref.since(mark)
        rss1 = gw.rss()
    report("garbage", answers={k: v.get("code", v["type"]) for k, v in seen.items()},
           rss_before_mib=rss0 >> 20, rss_after_mib=rss1 >> 20,
           p99_attack=ms(percentile(attacked, 99)))  # fmt: skip
    for name in ("not_json", "not_object", "binary", "unknown_op", "no_type"):
        assert (seen[name]["type"], seen[name]["code"]) == ("error", "invalid_message"), name
        assert seen[name]["message"].endswith("."), name
    assert seen["after"]["type"] == "snapshot"
    assert seen["huge"] == {"type": "closed", "code": 1009}
    assert seen["announced"] == {"type": "closed", "code": 1009}
    assert rss1 - rss0 < SLACK
    assert percentile(attacked, 99) < P99_BOUND


def test_clients_that_vanish_are_closed_and_their_descriptors_freed(
    fresh: GatewayProcess, store_url: str
) -> None:
    gw = fresh
    with DeltaPump(store_url, ["hot"], RATE, PAD), \
            DeltaPump(store_url, ["half"], RATE, 2_000), \
            reference_running(gw.url + "/v1/views/likes/hot/live") as ref, \
            BlackHoleProxy(gw.port) as proxy:  # fmt: skip
        wait_until(lambda: len(ref.latencies) > 5, 15)
        fds0, socks0 = gw.fds(), gw.sockets()
        mark = ref.mark()
        # Half-open: well-behaved clients (they read, they answer pings) through a proxy whose
        # network then drops everything without a FIN or RST: SSE streams of the busy key (a
        # few: the proxy is a Python loop), WebSockets with deltas flowing, and WebSockets
        # whose key never changes.
        with Behaved(proxy.port, ["hot"] * HALF_OPEN_SSE, ["half"] * N + ["idle"] * N):
            expected = 1 + HALF_OPEN_SSE + 2 * N
            wait_until(lambda: gw.metric("lv_subscriptions") >= expected, 10 + N / 10)
            silent: list[socket.socket] = []
            for _ in range(N):
                # Silent: the stream starts, then the client neither reads nor sends nor closes.
                s = raw_socket(gw.port)
                s.sendall(sse_request("likes", "hot"))
                assert s.recv(1024).startswith(b"HTTP/1.1 200")
                silent.append(s)
                silent.append(open_ws(gw.port, ("h", "likes", "hot")))
            opened = gw.sockets()
            proxy.black_hole()
            took = wait_until(lambda: gw.sockets() <= socks0, 30 + N / 10, 0.2)
            attacked = ref.since(mark)
            for s in silent:
                s.close()
    report("vanished", clients=HALF_OPEN_SSE + 4 * N, fds_before=fds0, sockets_before=socks0,
           sockets_open=opened, sockets_after=gw.sockets(), fds_after=gw.fds(),
           closed_within_s=f"{took:.1f}", p99_attack=ms(percentile(attacked, 99)))  # fmt: skip
    assert opened >= socks0 + HALF_OPEN_SSE + 2 * N
    assert gw.fds() <= fds0 + POOL
    assert percentile(attacked, 99) < P99_BOUND


def test_slowloris_requests_are_closed_after_the_header_timeout(fresh: GatewayProcess) -> None:
    gw = fresh
    fds0, socks0 = gw.fds(), gw.sockets()
    loris: list[socket.socket] = []
    for i in range(N):
        s = raw_socket(gw.port)
        if i % 2:
            s.sendall(b"GET /v1/views/likes/hot/live HTTP/1.1\r\nHost: gw\r\n")
        loris.append(s)  # the even ones send nothing at all
    start = time.monotonic()
    # Every one of them is accepted and held open: seen among the gateway's connections (a
    # busy gateway may accept the last ones after the first have already timed out).
    ours, seen = {s.getsockname()[1] for s in loris}, set[int]()

    def all_accepted() -> bool:
        seen.update(gw.peers() & ours)
        return seen == ours

    wait_until(all_accepted, HEADER_TIMEOUT, 0.05)
    trickle_until = start + 3 * HEADER_TIMEOUT
    while gw.sockets() > socks0 and time.monotonic() < trickle_until + 5:
        for s in loris[1::2]:
            if time.monotonic() < trickle_until:
                with contextlib.suppress(OSError):
                    s.sendall(b"X-Slow: 1\r\n")  # one more header line, never the blank one
        time.sleep(0.5)
    took = time.monotonic() - start
    closed = sum(1 for s in loris if _closed(s))
    for s in loris:
        s.close()
    report("slowloris", clients=N, fds_before=fds0, accepted=len(seen), fds_after=gw.fds(),
           sockets_after=gw.sockets(), closed_within_s=f"{took:.1f}")  # fmt: skip
    assert seen == ours
    assert gw.sockets() <= socks0 and gw.fds() <= fds0
    assert took < HEADER_TIMEOUT + 2
    assert closed == N


def _closed(s: socket.socket) -> bool:
    """Whether the gateway closed ``s`` (EOF or reset), reading whatever it said first."""
    s.settimeout(1)
    try:
        while s.recv(4096):
            pass
    except TimeoutError:
        return False
    except OSError:
        pass
    return True


def test_a_flood_of_tokenless_handshakes_leaves_signed_in_readers_their_slots(
    fresh: GatewayProcess, store_url: str
) -> None:
    """WebSockets that never sign in used to take connection slots until their deadline: a
    few hundred kept every slot full, and readers with a token got 503."""
    gw = fresh
    flood_n = UNAUTHENTICATED + 2 * N

    async def readers() -> dict[int, int]:
        headers = {"Authorization": f"Bearer {token()}"}
        statuses: dict[int, int] = {}
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as s:
            held = []
            for i in range(MAX_CONNECTIONS - 1):  # the reference holds one slot
                r = await s.get(f"{gw.url}/v1/views/likes/k{i % 50}/live", headers=headers)
                statuses[r.status] = statuses.get(r.status, 0) + 1
                held.append(r)
            for r in held:
                r.close()
        return statuses

    with DeltaPump(store_url, ["hot"], RATE), \
            reference_running(gw.url + "/v1/views/likes/hot/live") as ref:  # fmt: skip
        wait_until(lambda: len(ref.latencies) > 5, 15)
        mark = ref.mark()
        flood: list[socket.socket] = []
        for _ in range(flood_n):
            s = raw_socket(gw.port)
            s.sendall(ws_request(None))
            assert s.recv(4096).startswith(b"HTTP/1.1 101")  # accepted; it never signs in
            flood.append(s)
        statuses = asyncio.run(readers())
        waiting = gw.metric("lv_unauthenticated_sockets")
        refused = gw.metric('lv_connections_refused_total{budget="unauthenticated"}')
        attacked = ref.since(mark)
        for s in flood:
            s.close()
    report("tokenless", handshakes=flood_n, waiting=waiting, refused=refused,
           reader_statuses=statuses, p99_attack=ms(percentile(attacked, 99)))  # fmt: skip
    assert statuses == {200: MAX_CONNECTIONS - 1}
    assert refused == flood_n - UNAUTHENTICATED
    assert percentile(attacked, 99) < P99_BOUND


def test_a_stream_of_tiny_frames_does_not_hold_the_loop(
    fresh: GatewayProcess, store_url: str
) -> None:
    """6-byte frames used to be parsed and answered one system call each, all of a read at
    once: one client held the event loop, and every subscriber, for seconds."""
    gw = fresh
    ping = ws_frame(b"", opcode=0x9)
    flood = ping * TINY_FRAMES

    with DeltaPump(store_url, ["hot"], RATE), \
            reference_running(gw.url + "/v1/views/likes/hot/live") as ref:  # fmt: skip
        quiet = measure_baseline(ref, 2.0)
        mark = ref.mark()
        s = open_ws(gw.port, rcvbuf=None)
        answered = threading.Event()

        def read_answers() -> None:
            s.settimeout(30)
            seen = b""
            with contextlib.suppress(OSError):
                while part := s.recv(1 << 20):
                    seen = seen[-64:] + part
                    if b'"snapshot"' in seen:
                        answered.set()
                        return

        reader = threading.Thread(target=read_answers, daemon=True)
        reader.start()
        start = time.monotonic()
        # The pings, then a subscribe: its snapshot comes once the gateway has read them all.
        s.sendall(flood + ws_frame(b'{"type":"subscribe","sub":"a","view":"likes","key":"t"}'))
        assert answered.wait(60), "the subscribe behind the pings was never answered"
        took = time.monotonic() - start
        time.sleep(0.5)
        attacked = ref.since(mark)
        s.close()
        reader.join(2)
    report("tiny-frames", bytes=len(flood), frames=TINY_FRAMES, read_in_s=f"{took:.2f}",
           mb_per_s=f"{len(flood) / took / 1e6:.1f}", p99_quiet=ms(percentile(quiet, 99)),
           p99_attack=ms(percentile(attacked, 99)), max_attack=ms(max(attacked, default=0)),
           deliveries_attack=len(attacked))  # fmt: skip
    assert len(attacked) >= RATE * took / 2, "the reference subscriber kept receiving"
    assert percentile(attacked, 99) < P99_BOUND
