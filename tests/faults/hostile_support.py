"""Helpers for hostile-client tests: a gateway subprocess, a delta pump, a reference subscriber,
raw sockets that misbehave, and a TCP proxy that can turn into a black hole.

The gateway runs as ``python -m liveviews.gateway`` in its own process so that its memory (RSS) and open
file descriptors can be read from /proc, exactly as an operator would see them.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import jwt
import orjson
import redis

from liveviews.gateway.settings import DEV_JWT_SECRET
from tests.support.gateway import Writer, free_port

ROOT = Path(__file__).resolve().parents[2]
PAGE = os.sysconf("SC_PAGE_SIZE")
SHARDS = 8
PARTITIONS = 4


def hostile_n(default: int) -> int:
    """``LV_HOSTILE_N`` scales the number of hostile clients for longer runs."""
    raw = os.environ.get("LV_HOSTILE_N", "")
    return int(raw) if raw.isdigit() and int(raw) > 0 else default


def token(user: str = "alice", ttl: float = 3600) -> str:
    claims = {"sub": user, "scope": "read publish", "aud": "liveviews",
              "exp": int(time.time() + ttl)}  # fmt: skip
    return jwt.encode(claims, DEV_JWT_SECRET, algorithm="HS256")


def raise_nofile() -> int:
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


class GatewayProcess:
    """``python -m liveviews.gateway`` over ``store_url`` with ``env`` on top of small test settings."""

    def __init__(self, store_url: str, **env: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.ws_url = f"ws://127.0.0.1:{self.port}/v1/ws"
        self.env = {
            **os.environ,
            "REDIS_URL": store_url,
            "LV_PORT": str(self.port),
            "LV_LOG_PARTITIONS": str(PARTITIONS),
            "LV_CHANGE_SHARDS": str(SHARDS),
            "LV_FEED_BLOCK_MS": "100",
            "LV_STATIC_DIR": "off",
            "LV_CLIENT_JS_DIR": "off",
            "LV_LOG_FEED": "false",
            **env,
        }
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def start(self, timeout: float = 30.0) -> GatewayProcess:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "liveviews.gateway"], cwd=ROOT, env=self.env,
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )  # fmt: skip
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                err = self.process.stderr.read().decode() if self.process.stderr else ""
                raise RuntimeError(f"the gateway exited: {err[-2000:]}")
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2),
            ):
                return self._drain_stderr()
            time.sleep(0.1)
        self.stop()
        raise RuntimeError("the gateway did not start listening")

    def _drain_stderr(self) -> GatewayProcess:
        # The gateway logs to stderr; read it so a full pipe can never block the gateway.
        self.log: list[str] = []

        def drain() -> None:
            assert self.process is not None and self.process.stderr is not None
            for line in self.process.stderr:
                self.log.append(line.decode(errors="replace"))

        threading.Thread(target=drain, daemon=True).start()
        return self

    def stop(self) -> None:
        if self.process is None:
            return
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(5)

    def rss(self) -> int:
        return int(Path(f"/proc/{self.pid}/statm").read_text().split()[1]) * PAGE

    def fds(self) -> int:
        return len(os.listdir(f"/proc/{self.pid}/fd"))

    def _client_connections(self) -> list[Any]:
        """The gateway's open client connections (not its listener, not its store connections)."""
        import psutil

        return [c for c in psutil.Process(self.pid).net_connections("tcp")
                if c.laddr and c.laddr.port == self.port and c.raddr]  # fmt: skip

    def sockets(self) -> int:
        return len(self._client_connections())

    def peers(self) -> set[int]:
        """The client-side ports of the gateway's open client connections."""
        return {c.raddr.port for c in self._client_connections()}

    def metric(self, name: str) -> float:
        import urllib.request

        with urllib.request.urlopen(self.url + "/metrics", timeout=5) as resp:
            body = resp.read().decode()
        total = 0.0
        for line in body.splitlines():
            if line.startswith(name + " ") or line.startswith(name + "{"):
                total += float(line.rsplit(" ", 1)[1])
        return total


def wait_until(predicate: Any, timeout: float, interval: float = 0.1) -> float:
    """Seconds until ``predicate()`` held; fails after ``timeout``."""
    start = time.monotonic()
    while not predicate():
        if time.monotonic() - start > timeout:
            raise AssertionError(f"condition not met within {timeout} s")
        time.sleep(interval)
    return time.monotonic() - start


class DeltaPump:
    """Writes one delta per key ``rate`` times a second through the real sink, in a thread.

    Each value carries its write time ``t`` (so a reader can measure delivery latency) and
    ``pad`` bytes, so that clients which do not read fill their socket buffers quickly.
    """

    def __init__(self, store_url: str, keys: list[str], rate: float, pad: int = 0) -> None:
        from demo.chirp import app

        self.client = redis.Redis.from_url(store_url)
        self.writer = Writer(self.client, app, SHARDS)
        self.keys, self.rate, self.pad = keys, rate, "x" * pad
        self.written = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        period = 1.0 / self.rate
        next_at = time.monotonic()
        while not self._stop.is_set():
            now = time.time()
            self.writer.write([("likes", k, "row", {"t": now, "n": self.written, "pad": self.pad})
                               for k in self.keys])  # fmt: skip
            self.written += 1
            next_at += period
            self._stop.wait(max(0.0, next_at - time.monotonic()))

    def __enter__(self) -> DeltaPump:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)
        self.client.close()


@dataclass
class Reference:
    """A well-behaved SSE subscriber that records each delta's delivery latency, in seconds."""

    url: str
    latencies: list[float] = field(default_factory=list)
    ended: str | None = None

    def mark(self) -> int:
        return len(self.latencies)

    def since(self, mark: int) -> list[float]:
        return self.latencies[mark:]

    async def run(self) -> None:
        headers = {"Authorization": f"Bearer {token()}"}
        timeout = aiohttp.ClientTimeout(total=None, sock_read=30)
        async with (
            aiohttp.ClientSession(timeout=timeout) as s,
            s.get(self.url, headers=headers) as r,
        ):
            assert r.status == 200, await r.text()
            buf = b""
            async for chunk in r.content.iter_any():
                now = time.time()
                buf += chunk
                *blocks, buf = buf.split(b"\n\n")
                for block in blocks:
                    if block.startswith(b"event: delta"):
                        data = orjson.loads(block.split(b"data: ", 1)[1])
                        self.latencies.append(now - data["ops"][0]["value"]["t"])
                    elif block.startswith(b"event: end"):
                        self.ended = block.decode()
                        return


@contextlib.contextmanager
def reference_running(url: str) -> Iterator[Reference]:
    """The reference subscriber on its own event loop in a thread, for the whole block."""
    ref = Reference(url)

    async def run() -> None:
        with contextlib.suppress(asyncio.CancelledError):
            await ref.run()

    loop = asyncio.new_event_loop()
    task = loop.create_task(run())
    thread = threading.Thread(target=loop.run_until_complete, args=(task,), daemon=True)
    thread.start()
    try:
        yield ref
    finally:
        loop.call_soon_threadsafe(task.cancel)
        thread.join(5)
        loop.close()
    assert ref.ended is None, f"the reference subscriber was cut off: {ref.ended}"


class Behaved:
    """Well-behaved clients on their own loop in a thread: SSE streams and WebSocket
    subscriptions through ``base`` (a proxy), each read continuously (so pings are answered)
    until the block ends."""

    def __init__(self, port: int, sse_keys: list[str], ws_keys: list[str]) -> None:
        self.port, self.sse_keys, self.ws_keys = port, sse_keys, ws_keys
        self.opened = threading.Event()
        self.loop = asyncio.new_event_loop()
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self.loop.run_until_complete, args=(self._run(),),
                                        daemon=True)  # fmt: skip

    async def _run(self) -> None:
        self._stop = asyncio.Event()
        base = f"http://127.0.0.1:{self.port}"
        headers = {"Authorization": f"Bearer {token()}"}
        timeout = aiohttp.ClientTimeout(total=None)

        async def drain_sse(r: aiohttp.ClientResponse) -> None:
            while await r.content.readany():
                pass

        async def drain_ws(ws: aiohttp.ClientWebSocketResponse) -> None:
            while (await ws.receive()).type == aiohttp.WSMsgType.TEXT:
                pass

        conn = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=conn, timeout=timeout) as s:
            readers: list[asyncio.Task[None]] = []
            for key in self.sse_keys:
                r = await s.get(f"{base}/v1/views/likes/{key}/live", headers=headers)
                assert r.status == 200
                readers.append(asyncio.create_task(drain_sse(r)))
            for i, key in enumerate(self.ws_keys):
                ws = await s.ws_connect(f"ws://127.0.0.1:{self.port}/v1/ws",
                                        params={"access_token": token()}, max_msg_size=0)  # fmt: skip
                await ws.send_str(orjson.dumps({"type": "subscribe", "sub": f"b{i}",
                                                "view": "likes", "key": key}).decode())  # fmt: skip
                readers.append(asyncio.create_task(drain_ws(ws)))
            self.opened.set()
            await self._stop.wait()
            for t in readers:
                t.cancel()
            await asyncio.gather(*readers, return_exceptions=True)
            conn._close()  # noqa: SLF001 - the far side is a black hole: do not wait for it

    def __enter__(self) -> Behaved:
        self._thread.start()
        assert self.opened.wait(60), "the well-behaved clients did not connect"
        return self

    def __exit__(self, *exc: object) -> None:
        if self._stop is not None:
            self.loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))] if ordered else float("nan")


def raw_socket(port: int, rcvbuf: int | None = 4096) -> socket.socket:
    """A client socket with a small receive buffer, so that a client that stops reading shows."""
    s = socket.socket()
    if rcvbuf is not None:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.connect(("127.0.0.1", port))
    return s


def sse_request(view: str, key: str, user: str = "alice") -> bytes:
    return (f"GET /v1/views/{view}/{key}/live HTTP/1.1\r\nHost: gw\r\n"
            f"Authorization: Bearer {token(user)}\r\nAccept: text/event-stream\r\n\r\n").encode()  # fmt: skip


def ws_request(user: str | None = "alice") -> bytes:
    """A WebSocket handshake, with ``user``'s token (None: without one)."""
    query = f"?access_token={token(user)}" if user is not None else ""
    return (f"GET /v1/ws{query} HTTP/1.1\r\nHost: gw\r\n"
            "Upgrade: websocket\r\nConnection: Upgrade\r\n"
            "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n").encode()  # fmt: skip


def open_ws(
    port: int, *subscribes: tuple[str, str, str], rcvbuf: int | None = 4096
) -> socket.socket:
    """A raw WebSocket client, upgraded, with ``(sub, view, key)`` subscriptions sent.

    It waits for the 101 answer first: bytes sent behind the handshake in the same packet are
    not passed on by uvicorn (a real client never sends them before the answer).
    """
    s = raw_socket(port, rcvbuf)
    s.sendall(ws_request())
    answer = s.recv(4096)
    assert answer.startswith(b"HTTP/1.1 101"), answer[:200]
    for sub, view, key in subscribes:
        msg = {"type": "subscribe", "sub": sub, "view": view, "key": key}
        s.sendall(ws_frame(orjson.dumps(msg)))
    return s


def ws_frame(payload: bytes, opcode: int = 0x1) -> bytes:
    """One masked client frame (FIN set) of ``opcode``: 0x1 text, 0x2 binary."""
    mask = b"\x01\x02\x03\x04"
    n = len(payload)
    if n < 126:
        head = bytes([0x80 | opcode, 0x80 | n])
    elif n < 65536:
        head = bytes([0x80 | opcode, 0x80 | 126]) + n.to_bytes(2, "big")
    else:
        head = bytes([0x80 | opcode, 0x80 | 127]) + n.to_bytes(8, "big")
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


class BlackHoleProxy:
    """A TCP proxy on its own loop: forwards both ways until ``black_hole()``, after which it
    neither reads, forwards nor closes anything, like a peer whose network vanished without a
    FIN or RST. Its sockets stay open until ``close()``."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = 0
        self.holes = threading.Event()
        self.loop = asyncio.new_event_loop()
        self.writers: list[asyncio.StreamWriter] = []
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def __enter__(self) -> BlackHoleProxy:
        self._thread.start()
        self._ready.wait(5)
        return self

    def __exit__(self, *exc: object) -> None:
        def stop() -> None:
            for w in self.writers:
                w.transport.abort()
            self.loop.stop()

        self.loop.call_soon_threadsafe(stop)
        self._thread.join(5)

    def black_hole(self) -> None:
        self.holes.set()

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        server = self.loop.run_until_complete(asyncio.start_server(self._pair, "127.0.0.1", 0))
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        self.loop.run_forever()

    async def _pair(self, cr: asyncio.StreamReader, cw: asyncio.StreamWriter) -> None:
        # A small window towards the gateway, as a congested path would have, so that what
        # the gateway sends into the black hole backs up within seconds, not minutes.
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.setblocking(False)
        await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", self.target_port))
        ur, uw = await asyncio.open_connection(sock=sock)
        self.writers += [cw, uw]
        await asyncio.gather(self._pipe(cr, uw), self._pipe(ur, cw))

    async def _pipe(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        while not self.holes.is_set():
            try:
                chunk = await asyncio.wait_for(r.read(65536), 0.1)
            except TimeoutError:
                continue
            if not chunk or self.holes.is_set():
                break
            w.write(chunk)
        # Black hole: stop reading (the kernel buffers fill and the peers' sends stall) and
        # never close: no FIN, no RST reaches either side.
        await asyncio.Event().wait()
