"""Subscribers that outlive their gateway: SSE and WebSocket readers that reconnect and resume,
and a page that runs the JavaScript client in Chromium.

Each Python subscriber keeps the rows it built, every delta id it received (a duplicate or an
id not after the previous one fails it at once: ``lvclient.State``), how many times it
reconnected, and the resets the gateway sent. They run on one event loop in a thread of their
own, so the test's main thread is free to kill and restart processes and to drive Playwright.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import threading
import time
import urllib.request
import uuid
from collections.abc import Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import jwt
import orjson
import redis
import urllib3

from demo.chirp.generate import Activity
from liveviews.client.connection import RESUMABLE
from liveviews.gateway.settings import DEV_JWT_SECRET
from liveviews.log.events import log_stream
from tests.support.gateway import SSE, Event, State, position

RETRY_S = 0.1


def dev_token(user: str, ttl: float = 3600) -> str:
    """A token as the dev gateway signs them (``LV_ENV=dev``, no ``LV_JWT_SECRET``)."""
    body = {"sub": user, "scope": "read publish", "aud": "liveviews", "exp": int(time.time() + ttl)}
    return jwt.encode(body, DEV_JWT_SECRET, algorithm="HS256")


@dataclass
class Resumer:
    """One subscription's record across reconnects."""

    name: str
    view: str
    key: str
    state: State = field(default_factory=State)
    connects: int = 0
    failure: BaseException | None = None
    closed_at: list[float] = field(default_factory=list)
    """When each stream was seen to end (monotonic), to measure how promptly it ended."""

    def apply(self, ev: Event) -> None:
        try:
            self.state.apply(ev)
        except AssertionError as exc:
            self.failure = self.failure or exc
            raise


class ClientLoop:
    """An asyncio loop in a daemon thread, running the subscribers until ``stop()``."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.halt = asyncio.Event()
        self.tasks: list[Any] = []

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        self.tasks.append(asyncio.run_coroutine_threadsafe(coro, self.loop))

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.halt.set)
        for task in self.tasks:
            with contextlib.suppress(Exception):  # a subscriber's failure is in its record
                task.result(15)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()


async def sse_subscriber(base: str, token: str, sub: Resumer, halt: asyncio.Event) -> None:
    """Reads ``/v1/views/{view}/{key}/live``; on any end, reconnects with ``Last-Event-ID``."""
    url = f"{base}/v1/views/{sub.view}/{sub.key}/live"
    timeout = aiohttp.ClientTimeout(total=None, sock_read=5, sock_connect=2)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        while not halt.is_set() and sub.failure is None:
            headers = {"Authorization": f"Bearer {token}"}
            if sub.state.last_id is not None:
                headers["Last-Event-ID"] = sub.state.last_id
            try:
                resp = await session.get(url, headers=headers)
            except (aiohttp.ClientError, OSError, TimeoutError):
                await asyncio.sleep(RETRY_S)
                continue
            if resp.status != 200:
                resp.close()
                await asyncio.sleep(RETRY_S)
                continue
            sub.connects += 1
            stream = SSE(resp)
            try:
                while not halt.is_set():
                    try:
                        ev = await stream.next(timeout=0.5)
                    except aiohttp.ServerTimeoutError:
                        # Nothing read for sock_read: the connection is dead, not merely
                        # quiet (this is a TimeoutError too, and the response reads no more).
                        raise
                    except TimeoutError:
                        continue
                    sub.apply(ev)
            except (EOFError, aiohttp.ClientError, OSError):
                sub.closed_at.append(time.monotonic())
            except AssertionError:
                return
            finally:
                resp.close()


async def _subscribe(ws: aiohttp.ClientWebSocketResponse, s: Resumer) -> None:
    """Subscribe ``s`` on ``ws``, from the last event it applied if any."""
    msg: dict[str, Any] = {"type": "subscribe", "sub": s.name, "view": s.view, "key": s.key}
    if s.state.last_id is not None:
        msg["last_event_id"] = s.state.last_id
    await ws.send_str(orjson.dumps(msg).decode())
    s.connects += 1


async def ws_subscriber(base: str, token: str, subs: list[Resumer], halt: asyncio.Event) -> None:
    """One socket for several subscriptions; on close, a new socket resumes each of them."""
    url = base.replace("http://", "ws://") + "/v1/ws"
    by_id = {s.name: s for s in subs}
    async with aiohttp.ClientSession() as session:
        while not halt.is_set() and all(s.failure is None for s in subs):
            try:
                ws = await session.ws_connect(
                    url, heartbeat=None, timeout=aiohttp.ClientWSTimeout(ws_close=2)
                )
            except (aiohttp.ClientError, OSError, TimeoutError):
                await asyncio.sleep(RETRY_S)
                continue
            try:
                await ws.send_str(orjson.dumps({"type": "auth", "token": token}).decode())
                for s in subs:
                    await _subscribe(ws, s)
                while not halt.is_set():
                    try:
                        message = await ws.receive(timeout=0.5)
                    except TimeoutError:
                        continue
                    if message.type != aiohttp.WSMsgType.TEXT:
                        break
                    body = orjson.loads(message.data)
                    s = by_id.get(body.get("sub", ""))
                    if s is None:
                        continue  # the socket's own frames: authenticated, heartbeats
                    if body["type"] == "error":
                        if body.get("code") not in RESUMABLE:
                            # As the clients do, a subscription refused for good fails: the
                            # test says why rather than waiting for rows that never come.
                            s.failure = AssertionError(f"{s.name} refused: {body}")
                            return
                        await asyncio.sleep(RETRY_S)  # as the clients resume it, on the socket
                        await _subscribe(ws, s)
                        continue
                    s.apply(Event(body["type"], body.get("id"), body.get("data") or {}))
            except (aiohttp.ClientError, OSError):
                pass
            except AssertionError:
                return
            finally:
                now = time.monotonic()
                for s in subs:
                    s.closed_at.append(now)
                await ws.close()
            await asyncio.sleep(RETRY_S)


PAGE = """<!doctype html>
<meta charset="utf-8">
<title>fault subscriber</title>
<script type="module">
import { createClient, compareEntryIds } from '/client-js/index.js';
const params = new URLSearchParams(location.search);
const subs = JSON.parse(params.get('subs'));
const lv = window.lv = { records: {}, states: [], errors: [] };
const client = createClient({
  url: location.origin, token: params.get('token'), transport: params.get('transport'),
  backoff: { minDelay: 100, maxDelay: 1000 },
});
client.on('state', (e) => lv.states.push(e.newState));
client.on('error', (e) => lv.errors.push(String(e)));
for (const [view, key] of subs) {
  const rec = lv.records[`${view}/${key}`] = { rows: {}, deltas: [], snapshots: [], recovering: 0 };
  client.subscribe(view, key, {
    snapshot: (e) => {
      rec.snapshots.push(e.eventId); if (e.wasRecovering) rec.recovering++;
      rec.rows = Object.fromEntries(e.rows);
    },
    change: (e) => { rec.deltas.push(e.eventId); rec.rows = Object.fromEntries(e.rows); },
    error: (e) => lv.errors.push(String(e)),
  });
}
lv.ready = true;
</script>
"""


def write_page(static_dir: Path) -> None:
    static_dir.mkdir(parents=True, exist_ok=True)
    (static_dir / "faults.html").write_text(PAGE)


def check_delta_ids(ids: list[str]) -> None:
    """Strictly increasing positions: no delta twice, none out of order."""
    positions = [position(i) for i in ids]
    for a, b in zip(positions, positions[1:], strict=False):
        assert b > a, f"delta ids not strictly increasing: {a} then {b}"


class Publisher(threading.Thread):
    """POSTs Chirp activity one author's events at a time; records what was acknowledged.

    With ``resend``, it publishes as client-js does: each batch under an idempotency key of its
    own, sent again under that key when its answer is lost or is a 503, until it is taken; so
    every batch is appended once, and the log holds exactly what was acknowledged.
    """

    def __init__(self, url: str, seed: int, resend: bool = False) -> None:
        super().__init__(daemon=True)
        self.url = url + "/v1/events"
        self.resend = resend
        self.resent = 0
        self.resent_after: collections.Counter[str] = collections.Counter()
        """What each batch sent again was answered before (``503 <code>``, or ``lost``)."""
        self.activity = Activity(users=20, seed=seed)
        self.http = urllib3.PoolManager(timeout=urllib3.Timeout(connect=2, read=30), retries=False)
        self.halt = threading.Event()
        self.acked: list[tuple[int, str]] = []
        self.answers: collections.Counter[str] = collections.Counter()
        self.refused_bodies: list[Any] = []
        self.tokens: dict[str, str] = {}

    def run(self) -> None:
        while not self.halt.is_set():
            events = self.activity.take(5)
            by_author: dict[str, list[Any]] = collections.defaultdict(list)
            for e in events:
                by_author[e["payload"]["user"]].append(e)
            for user, batch in by_author.items():
                self._post(user, batch)
            time.sleep(0.02)

    def _post(self, user: str, batch: list[Any]) -> None:
        token = self.tokens.setdefault(user, dev_token(user))
        headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        if self.resend:
            headers["Idempotency-Key"] = uuid.uuid4().hex
        deadline = time.monotonic() + 120
        while True:
            try:
                r = self.http.request("POST", self.url, body=orjson.dumps(batch), headers=headers)
            except urllib3.exceptions.HTTPError as exc:
                self.answers[f"error {type(exc).__name__}"] += 1
                r = None
            if not self.resend or (r is not None and r.status != 503):
                break
            assert time.monotonic() < deadline, "a batch was not taken within 120 s"
            self.resent += 1
            self.resent_after["lost" if r is None else f"503 {_code(r.data)}"] += 1
            time.sleep(0.1)
        if r is None:
            return
        if r.status == 202:
            for o in orjson.loads(r.data)["offsets"]:
                self.acked.append((o["partition"], o["id"]))
            self.answers["202"] += 1
            return
        body = _body(r.data)
        self.answers[f"{r.status} {body.get('code')}"] += 1
        if r.status != 503:
            self.refused_bodies.append(body)

    def stop(self) -> None:
        self.halt.set()
        self.join(60)


def _body(data: bytes) -> dict[str, Any]:
    """An answer's JSON body; one that is not (a proxy's page, a cut answer) is kept as text,
    so that the test that counts it says what it was rather than the publisher dying on it."""
    try:
        body = orjson.loads(data)
    except orjson.JSONDecodeError:
        body = None
    return (
        body
        if isinstance(body, dict)
        else {"code": "not JSON", "text": data[:300].decode(errors="replace")}
    )


def _code(data: bytes) -> str:
    return str(_body(data).get("code"))


def snapshot_served(url: str) -> bool:
    """Does the gateway at ``url`` still answer a snapshot of ``activity/global``?"""
    request = urllib.request.Request(
        f"{url}/v1/views/activity/global", headers={"Authorization": f"Bearer {dev_token('x')}"}
    )
    with urllib.request.urlopen(request, timeout=5) as answer:
        return bool(answer.status == 200)


def missing_acked(client: redis.Redis, acked: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """The acknowledged offsets not in the log."""
    out = []
    by_partition: dict[int, list[str]] = collections.defaultdict(list)
    for p, i in acked:
        by_partition[p].append(i)
    for p, ids in by_partition.items():
        present = {e[0].decode() for e in client.xrange(log_stream(p))}
        out += [(p, i) for i in ids if i not in present]
    return out
