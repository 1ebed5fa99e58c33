"""Test helpers: a gateway served by a real uvicorn, SSE and WebSocket readers, a delta writer.

Deltas are written with the real ``ChangeTopicSink`` (without Spark), exactly as the pipeline
writes them; the gateway under test cannot tell the difference.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import jwt
import orjson
import redis
import uvicorn

from liveviews.app import App
from liveviews.gateway.app import create_app
from liveviews.gateway.gateway import Gateway
from liveviews.gateway.serve import config as server_config
from liveviews.gateway.settings import GatewaySettings
from liveviews.pipeline.sink import ChangeTopicSink
from liveviews.store.client import Client
from liveviews.store.embedded import free_port as free_port


class ServedGateway:
    """``create_app(settings)`` served in a thread of the test process by uvicorn with the
    gateway's own settings (``liveviews.gateway.serve.config``: uvloop, the guarded HTTP protocol)."""

    def __init__(self, settings: GatewaySettings, **overrides: Any) -> None:
        """``overrides`` replace uvicorn's settings (``http="h11"`` serves with another
        HTTP protocol than the gateway's own)."""
        self.settings = settings
        self.app = create_app(settings)
        config = server_config(settings, self.app, log_level="warning", timeout_graceful_shutdown=1,
                               **overrides)  # fmt: skip
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.url = f"http://127.0.0.1:{settings.port}"
        self.ws_url = f"ws://127.0.0.1:{settings.port}/v1/ws"

    @property
    def gateway(self) -> Gateway:
        gw: Gateway = self.app.state.gateway
        return gw

    def start(self) -> ServedGateway:
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the gateway did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)

    def awaited_files(self) -> list[list[str]]:
        """For each task on the gateway's loop, the files of the coroutines it is suspended
        in, outermost first."""

        def files() -> list[list[str]]:
            out = []
            for task in asyncio.all_tasks():
                chain, coro = [], task.get_coro()
                while coro is not None and hasattr(coro, "cr_code"):
                    chain.append(coro.cr_code.co_filename)
                    coro = coro.cr_await  # type: ignore[union-attr]
                out.append(chain)
            return out

        result: list[list[str]] = self.in_loop(files)
        return result

    def connection_kinds(self) -> list[str]:
        """The protocol class of each connection uvicorn counts as open, sorted."""
        kinds: list[str] = self.in_loop(
            lambda: sorted(type(c).__name__ for c in self.server.server_state.connections)
        )
        return kinds

    def in_loop(self, fn: Callable[[], Any]) -> Any:
        """``fn()`` run on the gateway's event loop, between two of its callbacks."""

        async def call() -> Any:
            return fn()

        loop = self.server.servers[0].get_loop()
        return asyncio.run_coroutine_threadsafe(call(), loop).result(10)

    def token(
        self, user: str, scope: str = "read publish", ttl: float = 3600, **claims: Any
    ) -> str:
        body = {"sub": user, "scope": scope, "aud": self.settings.jwt_audience,
                "exp": int(time.time() + ttl), **claims}  # fmt: skip
        return jwt.encode(body, self.settings.jwt_secret, algorithm="HS256")

    def headers(self, user: str = "alice", **kw: Any) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token(user, **kw)}"}


class Writer:
    """Writes deltas (and frontier advances) through the real sink, one batch per call."""

    def __init__(self, client: Client, app: App, shards: int, retention: int = 10_000):
        # One sink per pipeline, as in the job: each view's changes go through the sink of the
        # pipeline that writes it, and every pipeline's frontier advances with each write.
        names = list(app.pipelines)
        self.owner = {v: app.owner_of(v) for v in app.views}
        self.sinks = {n: ChangeTopicSink(client, app, n, shards, retention, names) for n in names}
        self.batches = itertools.count(1)

    def write(
        self,
        changes: list[tuple[str, str, str, Any]],
        frontier: dict[int, str] | None = None,
    ) -> None:
        """``changes``: (view, key, row, value or None to delete)."""

        def encode(value: Any) -> str | None:
            if value is None:
                return None
            return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()

        rows: list[dict[str, Any]] = [
            {"view": v, "key": k, "row": r, "value": encode(val),
             "score": float(val.get("score", 0)) if isinstance(val, dict) else 0.0}
            for v, k, r, val in changes
        ]  # fmt: skip
        batch = next(self.batches)
        for name, sink in self.sinks.items():
            sink.write([r for r in rows if self.owner[r["view"]] == name], batch, frontier)


@dataclass
class Event:
    event: str
    id: str | None
    data: dict[str, Any]


@dataclass
class SSE:
    """Reads one SSE response: frames, and heartbeat comments counted apart."""

    response: aiohttp.ClientResponse
    heartbeats: int = 0
    _buf: bytes = b""
    closed: bool = False

    async def next(self, timeout: float = 10.0, skip: tuple[str, ...] = ()) -> Event:
        """The next frame, passing over frames of the kinds in ``skip``."""
        while True:
            ev = await self._next(timeout)
            if ev.event not in skip:
                return ev

    async def _next(self, timeout: float) -> Event:
        async with asyncio.timeout(timeout):
            while True:
                sep = self._buf.find(b"\n\n")
                if sep >= 0:
                    block, self._buf = self._buf[:sep], self._buf[sep + 2 :]
                    ev = self._parse(block)
                    if ev is not None:
                        return ev
                    continue
                chunk = await self.response.content.readany()
                if not chunk:
                    self.closed = True
                    raise EOFError("the stream ended")
                self._buf += chunk

    async def heartbeat(self, timeout: float) -> None:
        """Until a heartbeat comment arrives; fails on any frame before it."""
        before = self.heartbeats
        async with asyncio.timeout(timeout):
            while self.heartbeats == before:
                self._buf += await self.response.content.readany()
                while b"\n\n" in self._buf:
                    block, self._buf = self._buf.split(b"\n\n", 1)
                    assert self._parse(block) is None, "a frame came before the heartbeat"

    def _parse(self, block: bytes) -> Event | None:
        event, id_, data = "message", None, None
        for line in block.decode().split("\n"):
            if line.startswith(":"):
                self.heartbeats += 1
                continue
            name, _, value = line.partition(": ")
            if name == "event":
                event = value
            elif name == "id":
                id_ = value
            elif name == "data":
                data = orjson.loads(value)
        return None if data is None else Event(event, id_, data)

    async def close(self) -> None:
        self.response.close()


async def open_sse(
    session: aiohttp.ClientSession, url: str, headers: dict[str, str] | None = None,
    params: dict[str, str] | None = None,
) -> SSE:  # fmt: skip
    resp = await session.get(url, headers=headers, params=params)
    if resp.status != 200:
        body = await resp.read()
        resp.close()
        raise AssertionError(f"status {resp.status}: {body!r}")
    return SSE(resp)


@dataclass
class State:
    """What a subscriber builds from its frames, and the checks that it never saw a gap."""

    rows: dict[str, Any] = field(default_factory=dict)
    last_id: str | None = None
    ids: list[str] = field(default_factory=list)
    resets: int = 0

    def apply(self, ev: Event) -> None:
        if ev.event == "snapshot":
            self.rows = dict(ev.data["rows"])
        elif ev.event == "delta":
            assert ev.id not in self.ids, f"duplicate delta {ev.id}"
            if self.ids:
                assert position(ev.id) > position(self.ids[-1]), "deltas out of order"
            for op in ev.data["ops"]:
                if op["op"] == "upsert":
                    self.rows[op["row"]] = op["value"]
                else:
                    self.rows.pop(op["row"], None)
        elif ev.event == "reset":
            self.resets += 1
        if ev.id is not None:
            if ev.event == "delta":
                self.ids.append(ev.id)
            self.last_id = ev.id


def position(event_id: str | None) -> tuple[int, int]:
    assert event_id is not None
    ms, seq = event_id.split(".", 1)[1].split("-")
    return int(ms), int(seq)


def stored_rows(
    client: redis.Redis, view: str, key: str, shards: int, namespace: str = ""
) -> dict[str, Any]:
    """The rows of ``view``/``key`` stored under ``namespace`` (a rebuilt version's)."""
    from liveviews.changes.topic import read_snapshot

    return read_snapshot(client, view, key, shards, namespace).rows


async def wait_for(predicate: Any, timeout: float = 10.0, interval: float = 0.02) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(interval)
