"""A lean SSE load client: thousands of streams per process, counted without parsing frames.

Each stream is a raw asyncio protocol on uvloop that sends one ``GET`` and then only looks for
the publisher's marker in what it receives: ``lvb<send time>~``, which the publisher puts in
every message it sends (a row value for the gateways, the body of a POST for nchan). Every
marker is one delivery; its latency is the receive time minus the send time (one machine, one
clock). Nothing else of the stream is parsed, so the same client reads every contender.

The client runs in worker processes (``Clients``), each with its own event loop and its half
of the connections, driven over a pipe by the benchmark; each reports its own CPU time, so a
reader can see how much of the machine the client took.
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import os
import resource
import socket
import struct
import time
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any, cast

from bench.common import raise_open_files

MARK = b"lvb"
END_MARK = b"~"
CONNECT_CONCURRENCY = 256

Request = bytes | tuple[bytes, bytes]
"""An HTTP request, or a WebSocket upgrade request and the message to send once upgraded."""


def marker(sent: float) -> str:
    """The text a publisher embeds in a message sent at ``sent`` (``time.time()``)."""
    return f"lvb{sent:.6f}~"


def ws_text_frame(text: str) -> bytes:
    """A masked (client-to-server) WebSocket text message of under 64 KiB."""
    payload = text.encode()
    mask = os.urandom(4)
    masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    n = len(payload)
    length = bytes([0x80 | n]) if n < 126 else bytes([0x80 | 126]) + struct.pack("!H", n)
    return b"\x81" + length + mask + masked


class Counts:
    __slots__ = ("deliveries", "latencies", "bytes", "ok", "failed")

    def __init__(self) -> None:
        self.deliveries = 0
        self.latencies = array("d")
        self.bytes = 0
        self.ok = 0
        self.failed = 0


class Stream(asyncio.Protocol):
    """One SSE stream: counts markers, keeps only a marker cut in two by a read."""

    __slots__ = ("request", "upgraded", "counts", "tail", "started", "transport")

    def __init__(self, request: bytes, counts: Counts, upgraded: bytes = b"") -> None:
        self.request = request
        self.upgraded = upgraded
        self.counts = counts
        self.tail = b""
        self.started = False
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is no subclass
        self.transport.write(self.request)

    def data_received(self, data: bytes) -> None:
        now = time.time()
        counts = self.counts
        counts.bytes += len(data)
        if not self.started:
            self.started = True
            if data.startswith(b"HTTP/1.1 200"):
                counts.ok += 1
            elif data.startswith(b"HTTP/1.1 101") and self.upgraded and self.transport:
                counts.ok += 1
                self.transport.write(self.upgraded)
            else:
                counts.failed += 1
        if self.tail:
            data = self.tail + data
            self.tail = b""
        i = data.find(MARK)
        while i >= 0:
            j = data.find(END_MARK, i)
            if j < 0:
                self.tail = data[i:]
                return
            counts.deliveries += 1
            counts.latencies.append(now - float(data[i + 3 : j]))
            i = data.find(MARK, j)
        if data.endswith(b"lv"):
            self.tail = b"lv"
        elif data.endswith(b"l"):
            self.tail = b"l"

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None

    def reset(self) -> None:
        """Close at once with a reset, so the client's ports do not linger in TIME_WAIT."""
        t = self.transport
        if t is None:
            return
        sock = t.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        t.close()


async def _connect(host: str, port: int, requests: list[Request], counts: Counts) -> list[Stream]:
    loop = asyncio.get_running_loop()
    gate = asyncio.Semaphore(CONNECT_CONCURRENCY)
    streams: list[Stream] = []

    async def one(request: Request) -> None:
        head, upgraded = request if isinstance(request, tuple) else (request, b"")
        async with gate:
            for attempt in range(5):
                try:
                    _, proto = await loop.create_connection(
                        lambda: Stream(head, counts, upgraded), host, port
                    )
                    streams.append(proto)
                    return
                except OSError:
                    await asyncio.sleep(0.2 * (attempt + 1))
            counts.failed += 1

    await asyncio.gather(*(one(r) for r in requests))
    return streams


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


async def _serve(pipe: Connection, host: str, port: int, requests: list[Request]) -> None:
    loop = asyncio.get_running_loop()
    counts = Counts()
    streams = await _connect(host, port, requests, counts)
    deadline = time.monotonic() + 60
    while counts.ok + counts.failed < len(requests) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    pipe.send(("connected", counts.ok, counts.failed))
    cpu0 = _cpu()
    while True:
        command = await loop.run_in_executor(None, pipe.recv)
        if command == "reset":
            counts.deliveries, counts.latencies, counts.bytes = 0, array("d"), 0
            cpu0 = _cpu()
            pipe.send("ok")
        elif command == "count":
            pipe.send(counts.deliveries)
        elif command == "collect":
            pipe.send((counts.deliveries, counts.latencies.tobytes(), counts.bytes, _cpu() - cpu0))
        elif command == "close":
            for s in streams:
                s.reset()
            await asyncio.sleep(0.2)
            pipe.send("closed")
            return


def _worker(pipe: Connection, host: str, port: int, requests: list[Request]) -> None:
    import uvloop

    raise_open_files()
    uvloop.run(_serve(pipe, host, port, requests))


@dataclass
class Collected:
    deliveries: int
    latencies: list[float]
    bytes: int
    client_cpu_seconds: float


class Clients:
    """``requests`` spread over ``processes`` client processes; a context manager."""

    def __init__(
        self, host: str, port: int, requests: Sequence[Request], processes: int = 2
    ) -> None:
        ctx = mp.get_context("spawn")
        self.pipes: list[Connection] = []
        self.procs: list[Any] = []
        for i in range(processes):
            mine, theirs = ctx.Pipe()
            p = ctx.Process(target=_worker, args=(theirs, host, port, requests[i::processes]))
            p.start()
            self.pipes.append(mine)
            self.procs.append(p)

    def __enter__(self) -> Clients:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def wait_connected(self, timeout: float = 120) -> tuple[int, int]:
        ok = failed = 0
        for pipe in self.pipes:
            if not pipe.poll(timeout):
                raise TimeoutError("the load client did not connect in time")
            _, o, f = pipe.recv()
            ok, failed = ok + o, failed + f
        return ok, failed

    def reset(self) -> None:
        for pipe in self.pipes:
            pipe.send("reset")
        for pipe in self.pipes:
            pipe.recv()

    def count(self) -> int:
        for pipe in self.pipes:
            pipe.send("count")
        return sum(int(pipe.recv()) for pipe in self.pipes)

    def collect(self) -> Collected:
        for pipe in self.pipes:
            pipe.send("collect")
        out = Collected(0, [], 0, 0.0)
        for pipe in self.pipes:
            n, raw, nbytes, cpu = pipe.recv()
            lat = array("d")
            lat.frombytes(raw)
            out.deliveries += n
            out.latencies.extend(lat)
            out.bytes += nbytes
            out.client_cpu_seconds += cpu
        return out

    def close(self) -> None:
        for pipe, p in zip(self.pipes, self.procs, strict=True):
            if p.is_alive():
                try:
                    pipe.send("close")
                    if pipe.poll(10):
                        pipe.recv()
                except (BrokenPipeError, EOFError, OSError):
                    pass
            p.join(5)
            if p.is_alive():
                p.kill()
                p.join()
        self.pipes, self.procs = [], []
