"""Jump the gateway's wall clock forward and back under load, with libfaketime.

A wall clock is stepped by NTP, by a VM resumed from a snapshot, or by hand: ``CLOCK_REALTIME``
moves and ``CLOCK_MONOTONIC`` does not. The gateway runs with libfaketime preloaded, reading its
offset from a file the test rewrites (``+600``, ``-600``, ``+0``), so its ``time.time()`` jumps
while its monotonic clock and the clocks of the store, the pipeline and the test do not. Each
jump is seen in the gateway's HTTP ``Date`` before anything is checked, so no check passes on a
clock that did not move.

Under load (a publisher that sends each batch again under its idempotency key until it is
taken, an SSE and a WebSocket subscriber of ``activity/global``, a supervised pipeline), the
clock goes 10 minutes ahead, then 10 minutes behind the real time (within a token's hour and
the day an event time may lie ahead), then back. Every client signs in with a token from the
gateway's ``/v1/dev/token`` taken before the clock moved, as client-js does in dev. In each
jump every connection through the clients' proxy is cut, so both subscribers resume and every
publish in flight is sent again on the jumped clock. After each jump: every acknowledged event
is in the log; nothing was refused (a publish dated by a right clock, a new SSE stream and a
WebSocket sign-in are taken); both subscribers resumed and receive again with no gap and no
duplicate (``State`` asserts both on every frame); heartbeats never stopped (a signed-in
WebSocket with no subscription and an SSE stream of the same key, neither cut, are never silent
longer than a heartbeat and a tick); and ``liveviews status`` lists the gateway from a report
written on the jumped clock. At the end the views are consistent with the log, and each
subscriber's rows are the stored rows.

``test_a_jump_beyond_a_tokens_life_refuses_it_until_the_clock_is_right`` pins the documented
behaviour of tokens (docs/RELIABILITY.md): a gateway two hours ahead refuses an hour's token as
``token_expired`` (a request, a new stream, a sign-in; an open stream and a signed-in socket are
ended so) and takes it again as soon as its clock is right; a gateway two hours behind takes a
token that expired an hour ago, and a token issued a moment ago.

``LV_FAULT_KILLS`` rounds of jumps (default 1: ahead, behind, back); ``LV_FAULT_STALL_S`` how long
each jump lasts at least (default 4 s); ``LV_FAULT_SEED``.
"""

from __future__ import annotations

import asyncio
import email.utils
import glob
import os
import socket
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import jwt
import orjson
import pytest
import redis
import urllib3

from liveviews.gateway.report import GATEWAYS_KEY, read_gateways
from liveviews.gateway.settings import DEV_JWT_SECRET
from liveviews.store.embedded import EmbeddedStore
from tests.client_py.proxy import Proxy
from tests.faults.clients import (
    ClientLoop,
    Publisher,
    Resumer,
    missing_acked,
    sse_subscriber,
    ws_subscriber,
)
from tests.faults.ending import logged_once
from tests.faults.harness import (
    SHARDS,
    Figures,
    Gateway,
    Knobs,
    Pipeline,
    wait_caught_up,
    wait_for_progress,
    wait_until,
)
from tests.support.gateway import free_port, stored_rows

KNOBS = Knobs.from_env(kills=1)
# scripts/faults.sh passes 0 when no STALL is given: the default then.
JUMP_S = float(os.environ.get("LV_FAULT_STALL_S") or 0) or 4.0
HOUR = 3600
OFFSET_S = 600
"""Ten minutes: well within a dev token's hour and the day an event time may lie ahead."""
HEARTBEAT_S = 1.0
"""The harness's ``LV_HEARTBEAT_SECONDS``."""
MAX_SILENCE_S = HEARTBEAT_S + 2.0
"""A quiet stream hears something at least this often: a heartbeat follows a second of silence
at the ticker's next tick (half a second), with a second to spare for a busy machine."""
LIBFAKETIME = "/usr/lib/*-linux-gnu/faketime/libfaketime.so.1"
VIEW, KEY = "activity", "global"


class Clock:
    """The gateway's wall clock: libfaketime reads its offset from ``path`` at every reading
    (``FAKETIME_NO_CACHE``) and leaves ``CLOCK_MONOTONIC`` alone, as a real clock step does."""

    def __init__(self, path: Path) -> None:
        found = glob.glob(LIBFAKETIME)
        assert found, f"libfaketime is not installed ({LIBFAKETIME}): apt-get install libfaketime"
        self.library = found[0]
        self.path = path
        self.offset = 0
        self.jumps = 0
        self._write(0)

    def env(self) -> dict[str, str]:
        return {
            "LD_PRELOAD": f"{self.library} {os.environ.get('LD_PRELOAD', '')}".strip(),
            "FAKETIME_TIMESTAMP_FILE": str(self.path),
            "FAKETIME_NO_CACHE": "1",
            "FAKETIME_DONT_FAKE_MONOTONIC": "1",
        }

    def set(self, offset: int) -> float:
        """Set the gateway's clock ``offset`` s from the real time; returns when (monotonic)."""
        self._write(offset)
        if offset != self.offset:
            self.jumps += 1
        self.offset = offset
        return time.monotonic()

    def jump(self, offset: int, gateway_url: str) -> float:
        """``set``, then wait until the gateway's ``Date`` shows it; returns when it did."""
        self.set(offset)
        # uvicorn refreshes its Date once a second, at a one-second resolution.
        wait_until(f"the gateway's Date header is {offset:+d} s off",
                   lambda: abs(gateway_skew(gateway_url) - offset) < 3, timeout=10)  # fmt: skip
        return time.monotonic()

    def _write(self, offset: int) -> None:
        # Replaced whole: libfaketime must never read a half-written offset.
        tmp = self.path.with_suffix(".new")
        tmp.write_text(f"{offset:+d}\n")
        os.replace(tmp, self.path)


def gateway_skew(base: str) -> float:
    """How far the gateway's clock is from this process's, from its HTTP ``Date`` header."""
    http = urllib3.PoolManager(timeout=urllib3.Timeout(total=2), retries=False)
    r = http.request("GET", base + "/healthz")
    date = r.headers["Date"]
    return email.utils.parsedate_to_datetime(date).timestamp() - time.time()


@dataclass
class Beats:
    """What a quiet connection heard, in the test's monotonic time."""

    name: str
    heartbeats: list[float] = field(default_factory=list)
    heard: list[float] = field(default_factory=list)
    """Every heartbeat and every frame."""
    ends: list[str] = field(default_factory=list)
    """How each connection ended: an ``end`` frame's or error's code, or ``closed``."""

    def during(self, start: float, end: float) -> tuple[int, float]:
        """Heartbeats within [start, end], and the longest silence there."""
        times = [start, *(t for t in self.heard if start <= t <= end), end]
        gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
        return sum(1 for t in self.heartbeats if start <= t <= end), max(gaps)


async def sse_beats(base: str, token: str, beats: Beats, halt: asyncio.Event) -> None:
    """Reads one SSE stream of ``activity/global``, noting when each heartbeat or frame came;
    reconnects if the connection ends, and stops at a refusal or an ``end`` frame."""
    url = f"{base}/v1/views/{VIEW}/{KEY}/live"
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=2)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        while not halt.is_set():
            try:
                async with session.get(url, headers={"Authorization": f"Bearer {token}"}) as r:
                    if r.status != 200:
                        beats.ends.append(f"{r.status} {orjson.loads(await r.read())['code']}")
                        return
                    if await _read_sse(r, beats, halt):
                        return
            except (aiohttp.ClientError, OSError):
                beats.ends.append("closed")
            await asyncio.sleep(0.1)


async def _read_sse(r: aiohttp.ClientResponse, beats: Beats, halt: asyncio.Event) -> bool:
    """Until the stream ends; True if it ended with an ``end`` frame."""
    buf = b""
    while not halt.is_set():
        try:
            chunk = await asyncio.wait_for(r.content.readany(), 0.5)
        except TimeoutError:
            continue
        if not chunk:
            beats.ends.append("closed")
            return False
        buf += chunk
        while b"\n\n" in buf:
            block, buf = buf.split(b"\n\n", 1)
            now = time.monotonic()
            beats.heard.append(now)
            if block.startswith(b":"):
                beats.heartbeats.append(now)
            elif block.startswith(b"event: end"):
                data = block.split(b"data: ", 1)[1]
                beats.ends.append(orjson.loads(data)["code"])
                return True
    return False


async def ws_beats(base: str, token: str, beats: Beats, halt: asyncio.Event) -> None:
    """A WebSocket that signs in and subscribes to nothing: it hears only heartbeats. It
    reconnects if the connection ends, and stops at an error (a refused or expired token)."""
    url = base.replace("http://", "ws://") + "/v1/ws"
    async with aiohttp.ClientSession() as session:
        while not halt.is_set():
            try:
                async with session.ws_connect(url, heartbeat=None) as ws:
                    await ws.send_str(orjson.dumps({"type": "auth", "token": token}).decode())
                    while not halt.is_set():
                        try:
                            message = await ws.receive(timeout=0.5)
                        except TimeoutError:
                            continue
                        if message.type != aiohttp.WSMsgType.TEXT:
                            beats.ends.append("closed")
                            break
                        now = time.monotonic()
                        beats.heard.append(now)
                        body = orjson.loads(message.data)
                        if body["type"] == "heartbeat":
                            beats.heartbeats.append(now)
                        elif body["type"] == "error":
                            beats.ends.append(body["code"])
                            return
            except (aiohttp.ClientError, OSError):
                beats.ends.append("closed")
            await asyncio.sleep(0.1)


async def ws_sign_in(base: str, token: str) -> str:
    """A new WebSocket's answer to ``auth``: ``authenticated`` or the error's code."""
    url = base.replace("http://", "ws://") + "/v1/ws"
    async with aiohttp.ClientSession() as session, session.ws_connect(url) as ws:
        await ws.send_str(orjson.dumps({"type": "auth", "token": token}).decode())
        body = orjson.loads(await ws.receive_str(timeout=5))
        return str(body["code"] if body["type"] == "error" else body["type"])


async def sse_open(base: str, token: str) -> str:
    """A new SSE stream's answer: ``snapshot`` (its first frame) or the refusal's status and
    code."""
    url = f"{base}/v1/views/{VIEW}/{KEY}/live"
    headers = {"Authorization": f"Bearer {token}"}
    async with aiohttp.ClientSession() as session, session.get(url, headers=headers) as r:
        if r.status != 200:
            return f"{r.status} {orjson.loads(await r.read())['code']}"
        head = await asyncio.wait_for(r.content.readuntil(b"\n"), 5)
        return head.decode().removeprefix("event: ").strip()


def run(clients: ClientLoop, coro: Any) -> Any:
    """Run ``coro`` on the clients' loop and wait for its result."""
    return asyncio.run_coroutine_threadsafe(coro, clients.loop).result(30)


def issued(base: str, user: str) -> str:
    """A token from the gateway's ``/v1/dev/token``, as client-js signs in in dev: it carries
    the gateway's clock as ``iat``."""
    http = urllib3.PoolManager(timeout=urllib3.Timeout(total=5), retries=False)
    r = http.request("POST", base + "/v1/dev/token", body=orjson.dumps({"user": user}),
                     headers={"Content-Type": "application/json"})  # fmt: skip
    assert r.status == 200, r.data
    return str(orjson.loads(r.data)["token"])


def signed(user: str, ttl: float, issued_ago: float = 0) -> str:
    """A token signed with the dev secret as the gateway and identity providers sign theirs,
    with ``iat``: issued ``issued_ago`` s ago by this process's (real) clock."""
    now = time.time()
    body = {"sub": user, "scope": "read publish", "aud": "liveviews",
            "iat": int(now - issued_ago), "exp": int(now + ttl)}  # fmt: skip
    return jwt.encode(body, DEV_JWT_SECRET, algorithm="HS256")


class Prober:
    """Publishes one event at a time under a token of its own, dated by this process's (real)
    clock, as a client whose clock is right does; records what was taken."""

    def __init__(self, base: str) -> None:
        self.url = base + "/v1/events"
        self.http = urllib3.PoolManager(timeout=urllib3.Timeout(total=10), retries=False)
        self.acked: list[tuple[int, str]] = []

    def publish(self, token: str, user: str = "probe") -> str:
        """``202`` or the refusal's status and code."""
        event = {"type": "profile_set", "payload": {"user": user, "name": uuid.uuid4().hex[:8]},
                 "time": int(time.time() * 1000)}  # fmt: skip
        r = self.http.request(
            "POST", self.url, body=orjson.dumps(event),
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        )  # fmt: skip
        body = orjson.loads(r.data)
        if r.status != 202:
            return f"{r.status} {body.get('code')}"
        self.acked += [(o["partition"], o["id"]) for o in body["offsets"]]
        return "202"


@contextmanager
def serving(store_dir: Path, tmp_path: Path, clock: Clock) -> Iterator[Gateway]:
    """A store on the real clock and a gateway on ``clock``."""
    store = EmbeddedStore(store_dir, free_port(), appendfsync="always")
    url = store.start()
    gateway = Gateway(url, tmp_path, free_port(), **clock.env())
    try:
        gateway.start()
        yield gateway
    finally:
        gateway.stop()
        store.stop()


def start_proxy(clients: ClientLoop, port: int) -> Proxy:
    """A TCP proxy on the clients' loop whose ``cut`` resets every connection through it."""
    return run(clients, Proxy(port).start())


@dataclass
class Run:
    """What the clients of a run under load saw."""

    publisher: Publisher
    prober: Prober
    subs: tuple[Resumer, ...]
    jumps: list[dict[str, Any]]
    catch_up_s: float

    @property
    def acked(self) -> list[tuple[int, str]]:
        return self.publisher.acked + self.prober.acked


@pytest.mark.timeout(300 + KNOBS.kills * 2 * (60 + int(JUMP_S)))
def test_clock_jumps_lose_nothing_and_refuse_nothing(tmp_path: Path) -> None:
    clock = Clock(tmp_path / "faketime")
    store = EmbeddedStore(tmp_path / "store", free_port(), appendfsync="always")
    url = store.start()
    client = redis.Redis.from_url(url)
    try:
        done = jumps_under_load(url, client, tmp_path, clock)
        deltas = logged_once(client, done.acked)
    finally:
        client.close()
        store.stop()
    publisher = done.publisher
    assert publisher.refused_bodies == [], (done.jumps, publisher.refused_bodies[:3])
    sse, ws = done.subs
    Figures("clock_jumps", {
        "seed": KNOBS.seed,
        "rounds": KNOBS.kills,
        "offset_s": OFFSET_S,
        "jump_s": JUMP_S,
        "jumps_made": clock.jumps,
        "jumps": done.jumps,
        "heartbeats_behind": {name: sum(j["quiet"][name]["heartbeats"] for j in done.jumps
                                        if j["offset_s"] < 0) for name in ("sse", "ws")},
        "events_acknowledged": len(publisher.acked),
        "publishes_resent": publisher.resent,
        "sse_resumes": sse.connects - 1,
        "ws_resumes": ws.connects - 1,
        "sse_deltas": len(sse.state.ids),
        "ws_deltas": len(ws.state.ids),
        "deltas_checked": deltas,
        "catch_up_s": round(done.catch_up_s, 1),
    }).print()  # fmt: skip


def jumps_under_load(url: str, client: redis.Redis, tmp_path: Path, clock: Clock) -> Run:
    """Start the pipeline, the gateway on ``clock`` and the clients; jump; stop them all once
    the views have caught up and the subscribers hold the stored rows."""
    rng = KNOBS.rng()
    pipeline = Pipeline(url, tmp_path, supervised=True)
    gateway = Gateway(url, tmp_path, free_port(), **clock.env())
    clients = ClientLoop()
    sse = Resumer("sse-activity", VIEW, KEY)
    ws = Resumer("ws-activity", VIEW, KEY)
    quiet = (Beats("sse"), Beats("ws"))
    jumps: list[dict[str, Any]] = []
    publisher: Publisher | None = None
    proxy: Proxy | None = None
    prober = Prober(gateway.url)
    try:
        gateway.start()
        pipeline.start()
        proxy = start_proxy(clients, gateway.port)
        # Every client signs in with a token the gateway issued before its clock moved.
        publisher = Publisher(proxy.url, KNOBS.seed, resend=True)
        publisher.tokens = {u: issued(gateway.url, u) for u in publisher.activity.users}
        publisher.start()
        wait_for_progress(client, 0, pipeline)
        tokens = {name: issued(gateway.url, name) for name in ("sse", "ws", "quiet", "probe")}
        clients.spawn(sse_subscriber(proxy.url, tokens["sse"], sse, clients.halt))
        clients.spawn(ws_subscriber(proxy.url, tokens["ws"], [ws], clients.halt))
        clients.spawn(sse_beats(gateway.url, tokens["quiet"], quiet[0], clients.halt))
        clients.spawn(ws_beats(gateway.url, tokens["quiet"], quiet[1], clients.halt))
        wait_until("both subscribers have a snapshot",
                   lambda: sse.state.last_id is not None and ws.state.last_id is not None)  # fmt: skip
        clock.jump(0, gateway.url)  # the clock under libfaketime starts right
        for _ in range(KNOBS.kills):
            for offset in (OFFSET_S, -OFFSET_S):
                jumps.append(jump_under_load(
                    clock, offset, gateway, proxy, clients, publisher, prober, tokens["probe"],
                    client, (sse, ws), quiet, rng.uniform(0.3, 0.7),
                ))  # fmt: skip
            clock.jump(0, gateway.url)
            time.sleep(1.0)
        publisher.stop()
        catch_up = wait_caught_up(client, pipeline)
        want = stored_rows(client, VIEW, KEY, SHARDS)
        for r in (sse, ws):
            wait_until(f"{r.name} holds the stored rows", holds(r, want), 30)
            assert r.failure is None, r.failure
        assert gateway.process is not None and gateway.process.poll() is None
        return Run(publisher, prober, (sse, ws), jumps, catch_up)
    finally:
        if publisher is not None:
            publisher.halt.set()
        if proxy is not None:
            run(clients, proxy.close())
        clients.stop()
        gateway.stop()
        pipeline.stop()


def jump_under_load(
    clock: Clock, offset: int, gateway: Gateway, proxy: Proxy, clients: ClientLoop,
    publisher: Publisher, prober: Prober, token: str, client: redis.Redis,
    subs: tuple[Resumer, ...], quiet: tuple[Beats, ...], cut_at: float,
) -> dict[str, Any]:  # fmt: skip
    """Hold the gateway's clock ``offset`` s off for ``JUMP_S`` (and until both subscribers
    have resumed and received, and the gateway has reported), cutting every proxied connection
    ``cut_at`` of the way in; check what the jump must not break, and return what it showed."""
    answered = publisher.answers.copy()
    acked_before = len(publisher.acked)
    start = clock.jump(offset, gateway.url)
    assert gateway.process is not None
    name = f"{socket.gethostname()}:{gateway.process.pid}"
    report = client.hget(GATEWAYS_KEY, name)
    time.sleep(JUMP_S * cut_at)
    seen = {r.name: (r.connects, len(r.state.ids)) for r in subs}
    clients.loop.call_soon_threadsafe(proxy.cut)
    probes = probe(prober, clients, gateway.url, token)
    for r in subs:
        connects, ids = seen[r.name]
        wait_until(f"{r.name} resumes and receives at {offset:+d} s",
                   resumed(r, connects, ids), timeout=60)  # fmt: skip
        assert r.failure is None, r.failure
    # ``liveviews status`` lists the gateway from a report it wrote on the jumped clock.
    wait_until("the gateway reports on the jumped clock",
               lambda: client.hget(GATEWAYS_KEY, name) != report, timeout=10)  # fmt: skip
    status = [g.name for g in read_gateways(client)]
    assert status == [name], f"liveviews status lists {status} at {offset:+d} s"
    time.sleep(max(0.0, start + JUMP_S - time.monotonic()))
    end = time.monotonic()
    assert abs(gateway_skew(gateway.url) - offset) < 3, "the clock moved back on its own"
    heard = {b.name: never_silent(b, start, end) for b in quiet}
    time.sleep(1.0)  # what the cut left unanswered is sent again and answered now
    missing = missing_acked(client, publisher.acked[:acked_before])
    assert not missing, f"acknowledged events lost in a jump to {offset:+d} s: {missing[:5]}"
    assert publisher.refused_bodies == [], publisher.refused_bodies[:3]
    return {
        "offset_s": offset,
        "held_s": round(end - start, 1),
        "answers": dict(publisher.answers - answered),
        "probes": probes,
        "quiet": heard,
    }


def resumed(r: Resumer, connects: int, ids: int) -> Callable[[], bool]:
    """Has ``r`` connected again since its ``connects``-th connection and received more than
    ``ids`` deltas (or failed)?"""
    return lambda: (r.connects > connects and len(r.state.ids) > ids) or r.failure is not None


def holds(r: Resumer, rows: dict[str, Any]) -> Callable[[], bool]:
    return lambda: r.state.rows == rows


def probe(prober: Prober, clients: ClientLoop, base: str, token: str) -> dict[str, str]:
    """What is refused for nothing: an event dated by a right clock, a new stream, a sign-in."""
    answers = {
        "publish": prober.publish(token),
        "sse": run(clients, sse_open(base, token)),
        "ws": run(clients, ws_sign_in(base, token)),
    }
    assert answers == {"publish": "202", "sse": "snapshot", "ws": "authenticated"}, answers
    return answers


def never_silent(beats: Beats, start: float, end: float) -> dict[str, Any]:
    """Check that ``beats`` heard heartbeats in [start, end], never silent for longer than
    ``MAX_SILENCE_S``, and that its connection stayed open; returns what it heard."""
    heartbeats, silence = beats.during(start, end)
    heard = {"heartbeats": heartbeats, "longest_silence_s": round(silence, 2)}
    assert heartbeats >= (end - start) / MAX_SILENCE_S - 1, (beats.name, heard)
    assert silence <= MAX_SILENCE_S, (beats.name, heard)
    assert not beats.ends, (beats.name, beats.ends)
    return heard


@pytest.mark.timeout(120)
def test_a_jump_beyond_a_tokens_life_refuses_it_until_the_clock_is_right(tmp_path: Path) -> None:
    clock = Clock(tmp_path / "faketime")
    clients = ClientLoop()
    hour = signed("probe", HOUR)
    day = signed("probe", 24 * HOUR)
    expired = signed("probe", -HOUR, issued_ago=2 * HOUR)
    try:
        with serving(tmp_path / "store", tmp_path, clock) as gateway:
            prober = Prober(gateway.url)
            assert prober.publish(hour) == "202"
            assert prober.publish(expired) == "401 token_expired"
            streams = {name: Beats(name) for name in ("sse-hour", "ws-hour", "sse-day", "ws-day")}
            for name, beats in streams.items():
                follow = sse_beats if name.startswith("sse") else ws_beats
                token = hour if name.endswith("hour") else day
                clients.spawn(follow(gateway.url, token, beats, clients.halt))
            wait_until("every stream hears a heartbeat",
                       lambda: all(b.heartbeats for b in streams.values()))  # fmt: skip
            figures = {
                "refused_two_hours_ahead": two_hours_ahead(clock, gateway, clients, prober,
                                                           hour, day, streams),
                **two_hours_behind(clock, gateway, clients, prober, hour, expired, streams),
                "accepted_again_after_s": right_again(clock, gateway, clients, prober, hour,
                                                      expired),
            }  # fmt: skip
            assert len(set(prober.acked)) == len(prober.acked) == 5
    finally:
        clients.stop()
    Figures("clock_jumps_tokens", {"jumps_made": clock.jumps,
                                   "offsets_s": [2 * HOUR, -2 * HOUR, 0], **figures}).print()  # fmt: skip


def two_hours_ahead(
    clock: Clock, gateway: Gateway, clients: ClientLoop, prober: Prober, hour: str, day: str,
    streams: dict[str, Beats],
) -> dict[str, str]:  # fmt: skip
    """The hour's token is past its ``exp`` on this clock (a token signed with the secret is
    checked with no leeway): refused everywhere, and what it holds open is ended; the day's
    token, which outlives the error, is taken. Returns the refusals."""
    clock.jump(2 * HOUR, gateway.url)
    refused = {
        "publish": prober.publish(hour),
        "sse": run(clients, sse_open(gateway.url, hour)),
        "ws": run(clients, ws_sign_in(gateway.url, hour)),
    }
    # Streams and sockets already open with it are ended at the ticker's next tick.
    held = [streams["sse-hour"], streams["ws-hour"]]
    wait_until("the open stream and socket end", lambda: all(b.ends for b in held), timeout=10)
    refused |= {b.name: b.ends[0] for b in held}
    assert refused == {"publish": "401 token_expired", "sse": "401 token_expired",
                       "ws": "token_expired", "sse-hour": "token_expired",
                       "ws-hour": "token_expired"}, refused  # fmt: skip
    assert prober.publish(day) == "202"
    return refused


def two_hours_behind(
    clock: Clock, gateway: Gateway, clients: ClientLoop, prober: Prober, hour: str,
    expired: str, streams: dict[str, Beats],
) -> dict[str, Any]:  # fmt: skip
    """A token that expired an hour ago is taken, as documented; so is one issued a moment
    ago, whose ``iat`` is ahead of this clock; and the streams open with the day's token hear
    their heartbeats. Returns what was answered and heard."""
    behind = clock.jump(-2 * HOUR, gateway.url)
    taken_expired = prober.publish(expired)
    assert taken_expired == "202", taken_expired
    fresh = probe(prober, clients, gateway.url, hour)
    time.sleep(JUMP_S)
    end = time.monotonic()
    heard = {b.name: never_silent(b, behind, end) for b in (streams["sse-day"], streams["ws-day"])}
    return {
        "expired_token_two_hours_behind": taken_expired,
        "fresh_token_two_hours_behind": fresh,
        "heard_two_hours_behind": heard,
    }


def right_again(
    clock: Clock, gateway: Gateway, clients: ClientLoop, prober: Prober, hour: str, expired: str
) -> float:
    """The hour's token is taken as soon as the clock is right, the expired one refused again;
    returns how long after the clock was set the token was first taken."""
    right = clock.set(0)
    while (answer := prober.publish(hour)) != "202":
        assert answer == "401 token_expired", answer
        assert time.monotonic() - right < 10, "the token is still refused"
        time.sleep(0.02)
    accepted_after = time.monotonic() - right
    clock.jump(0, gateway.url)  # its Date shows it too
    assert run(clients, sse_open(gateway.url, hour)) == "snapshot"
    assert run(clients, ws_sign_in(gateway.url, hour)) == "authenticated"
    assert prober.publish(expired) == "401 token_expired"
    return round(accepted_after, 3)
