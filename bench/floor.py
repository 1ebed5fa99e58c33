"""The floor under the gateway's CPU per delivery, measured in parts.

    .venv/bin/python -m bench.floor [--quick]

A delivery to an SSE subscriber is one write to its connection plus the gateway's Python
between the change feed and that write. This measures each part on its own, on this machine:

- **a write, by itself**: a process on uvloop holds N loopback connections, a second process
  reads them all, and the first writes one delta-sized HTTP chunk to each connection, 60 times
  over; CPU time per write, through the event loop's transport and straight to the socket
  (``os.write``), which is what the gateway does while the transport holds nothing unsent;
- **the gateway's Python per delivery**: the hub hands deltas to N ``SseSender``s whose
  connection does nothing, so only the Python path is timed (best of 5): for streams on their
  own, as each took its deltas before cohorts and as one out of step still does, and for streams
  in their key's cohort (``liveviews.gateway.fanout.cohort``), each writing to ``/dev/null``: a
  system call that moves nothing;
- **WebSocket framing**: a delta-sized message framed by the gateway's own RFC 6455 code
  (``liveviews.gateway.wire.rfc6455``) and by the ``websockets`` package's sans-I/O codec, and
  client messages parsed by each (best of 5): the figures behind keeping the hand-written codec.

nginx+nchan pays the same system call per delivery; what separates the gateway from it is the
Python path and what the loop does around the call.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing
import os
import selectors
import socket
import time
from typing import Any, cast

from bench.common import Report, Row, raise_open_files, save
from bench.moment import Moment

CHUNK = b"8d\r\n" + b"x" * 141 + b"\r\n"
"""An HTTP chunk the size of a small delta frame (a counter's upsert with its event id)."""
ROUNDS = 60


def _read_all(port: int, n: int, ready: Any, stop: Any) -> None:
    raise_open_files()
    socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(n)]
    selector = selectors.DefaultSelector()
    for s in socks:
        s.setblocking(False)
        selector.register(s, selectors.EVENT_READ)
    ready.set()
    while not stop.is_set():
        for key, _ in selector.select(0.2):
            with contextlib.suppress(BlockingIOError):
                key.fileobj.recv(65536)  # type: ignore[union-attr]


async def _write_cost(n: int, rounds: int) -> dict[str, float]:
    transports: list[asyncio.Transport] = []

    class Accept(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            transports.append(transport)  # type: ignore[arg-type]

    loop = asyncio.get_running_loop()
    server = await loop.create_server(Accept, "127.0.0.1", 0, backlog=4096)
    port = server.sockets[0].getsockname()[1]
    ctx = multiprocessing.get_context("spawn")
    ready, stop = ctx.Event(), ctx.Event()
    reader = ctx.Process(target=_read_all, args=(port, n, ready, stop))
    reader.start()
    try:
        while not ready.is_set() or len(transports) < n:
            await asyncio.sleep(0.05)
        writes = [t.write for t in transports]
        fds = [t.get_extra_info("socket").fileno() for t in transports]
        out: dict[str, float] = {}
        for mode in ("transport", "socket", "transport", "socket"):  # alternating, best of two
            await asyncio.sleep(0.5)
            cpu = time.process_time()
            for _ in range(rounds):
                if mode == "transport":
                    for write in writes:
                        write(CHUNK)
                else:
                    for fd in fds:
                        os.write(fd, CHUNK)
                await asyncio.sleep(0.05)  # the reader drains; idle time costs no CPU
            us = (time.process_time() - cpu) / (n * rounds) * 1e6
            out[mode] = round(min(out.get(mode, us), us), 2)
        return out
    finally:
        stop.set()
        reader.join(10)
        for t in transports:
            t.abort()
        server.close()


def write_cost(n: int, rounds: int = ROUNDS) -> dict[str, float]:
    """CPU µs per write to one of ``n`` loopback connections, by transport and by socket."""
    import uvloop

    raise_open_files()
    return uvloop.run(_write_cost(n, rounds))


def python_path_cost(n: int, rounds: int = 50, cohort: bool = False) -> float:
    """µs of the hub→stream path per delivery to ``n`` subscribers of one key, without I/O;
    with ``cohort``, the streams are in their key's cohort and write to ``/dev/null``."""
    from liveviews.changes.topic import Delta
    from liveviews.gateway.fanout.hub import Hub
    from liveviews.gateway.fanout.items import Progress
    from liveviews.gateway.fanout.subscription import Source, Subscription
    from liveviews.gateway.live.sse import SseSender, sse_cohort
    from liveviews.gateway.live.ticker import Ticker
    from liveviews.gateway.metrics import Metrics
    from liveviews.gateway.wire import frames

    class IdleTransport:
        """Takes writes and does nothing: only the Python around them is timed."""

        is_closing = staticmethod(bool)
        get_write_buffer_size = staticmethod(int)
        write = staticmethod(len)

        def get_extra_info(self, name: str, default: Any = None) -> Any:
            return default

    class NullSocket:
        def __init__(self, fd: int) -> None:
            self.fd = fd

        def fileno(self) -> int:
            return self.fd

    class NullTransport(IdleTransport):
        """Its socket is ``/dev/null``: the cohort's writes are system calls that move nothing."""

        def __init__(self, fd: int) -> None:
            self.socket = NullSocket(fd)

        def get_extra_info(self, name: str, default: Any = None) -> Any:
            return self.socket if name == "socket" else default

    async def run() -> float:
        metrics = Metrics()
        ticker = Ticker(15.0, metrics)
        hub = Hub(metrics, 0.25, new_cohort=lambda: sse_cohort(ticker, metrics))
        null = os.open(os.devnull, os.O_WRONLY)
        for _ in range(n):
            # A started subscription as the stream sees it; no store is read after the start.
            sub = Subscription(cast(Source, None), "v", "k", None)
            sub.epoch = "e"
            subscriber = sub.subscriber = hub.attach("v", "k", 100)
            transport = NullTransport(null) if cohort else IdleTransport()
            subscriber.sink = SseSender(sub, transport, ticker, metrics, float("inf"), lambda: None)
            hub.settle(subscriber)
        assert len(hub.cohorts.get(("v", "k"), ())) == (n if cohort else 0)
        best = float("inf")
        seq = 0
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(rounds):
                seq += 1
                delta = Delta(f"{seq}-0", "v", "k", [{"op": "upsert", "row": "r", "value": seq}],
                              "p", seq)  # fmt: skip
                hub.publish("e", [delta], [Progress("e", f"{seq}-0", frames.progress({"p": "1"}))])
            best = min(best, (time.perf_counter() - t0) / (n * rounds) * 1e6)
        assert metrics.deltas_out == n * rounds * 5, "every delivery was made"
        os.close(null)
        return round(best, 3)

    return asyncio.run(run())


def null_write_cost(n: int) -> float:
    """µs per ``os.write`` of ``CHUNK`` to ``/dev/null`` in a plain loop (best of 5)."""
    fd = os.open(os.devnull, os.O_WRONLY)
    try:
        best = float("inf")
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(n):
                os.write(fd, CHUNK)
            best = min(best, (time.perf_counter() - t0) / n * 1e6)
        return round(best, 3)
    finally:
        os.close(fd)


def codec_cost(rounds: int) -> dict[str, float]:
    """µs per server message framed, and per client message parsed, by the gateway's RFC 6455
    code and by ``websockets``' sans-I/O codec; MB/s of 6-byte client frames parsed by each."""
    import timeit

    from websockets.frames import Frame, Opcode
    from websockets.protocol import Protocol, Side, State

    from liveviews.gateway.wire import rfc6455

    payload = CHUNK[4:-2]
    client = Frame(Opcode.TEXT, b'{"type":"subscribe","sub":"a","view":"v","key":"k"}')
    messages = client.serialize(mask=True) * 100
    pings = Frame(Opcode.PING, b"").serialize(mask=True) * 10_000
    theirs = Protocol(Side.SERVER, state=State.OPEN, max_size=65_536)

    def their_text() -> None:
        theirs.send_text(payload)
        theirs.data_to_send()

    def their_read(data: bytes) -> None:
        theirs.receive_data(data)
        theirs.events_received()
        theirs.data_to_send()

    ours = rfc6455.Reader(65_536)

    def best(fn: Any, number: int) -> float:
        return min(timeit.repeat(fn, number=number, repeat=5)) / number

    n = 2_000 * rounds
    return {
        "write_us.hand_written": round(best(lambda: rfc6455.text(payload), n) * 1e6, 3),
        "write_us.websockets": round(best(their_text, n) * 1e6, 3),
        "read_us.hand_written": round(best(lambda: ours.feed(messages), rounds) / 100 * 1e6, 3),
        "read_us.websockets": round(best(lambda: their_read(messages), rounds) / 100 * 1e6, 3),
        "tiny_frames_mb_s.hand_written": round(
            len(pings) / best(lambda: ours.feed(pings), 5) / 1e6, 1
        ),
        "tiny_frames_mb_s.websockets": round(
            len(pings) / best(lambda: their_read(pings), 5) / 1e6, 1
        ),
    }


def run(quick: bool = False, name: str = "floor") -> Report:
    moment = Moment()
    n = 200 if quick else 10_000
    writes = write_cost(n, 5 if quick else ROUNDS)
    python = python_path_cost(n, 5 if quick else 50)
    in_cohort = python_path_cost(n, 5 if quick else 50, cohort=True)
    null_write = null_write_cost(n * (5 if quick else 50))
    codec = codec_cost(1 if quick else 20)
    figures = {"connections": n, "write_us": writes, "python_path_us": python,
               "cohort_path_us": in_cohort, "null_write_us": null_write,
               "chunk_bytes": len(CHUNK), "websocket_codec": codec}  # fmt: skip
    save(name, figures, moment)
    rows = [
        Row(f"a {len(CHUNK)}-byte write to one of {n:,} loopback connections, by the loop's "
            "transport", f"{writes['transport']} µs CPU"),
        Row("the same write straight to the socket (the gateway's path)",
            f"{writes['socket']} µs CPU"),
        Row(f"the gateway's Python per delivery, hub to stream, {n:,} subscribers of one key, "
            "each stream on its own", f"{python} µs"),
        Row("the same, the streams in their key's cohort, each delivery a write to /dev/null",
            f"{in_cohort} µs"),
        Row("a write to /dev/null alone, in a Python loop", f"{null_write} µs"),
        Row("a delta-sized WebSocket message framed by the gateway's RFC 6455 code",
            f"{codec['write_us.hand_written']} µs", baseline=f"websockets' sans-I/O codec: "
            f"{codec['write_us.websockets']} µs"),
        Row("a client message parsed by the gateway's RFC 6455 reader",
            f"{codec['read_us.hand_written']} µs", baseline=f"websockets' sans-I/O codec: "
            f"{codec['read_us.websockets']} µs"),
        Row("6-byte client frames parsed by the gateway's reader",
            f"{codec['tiny_frames_mb_s.hand_written']} MB/s", baseline=f"websockets' sans-I/O "
            f"codec: {codec['tiny_frames_mb_s.websockets']} MB/s"),
    ]  # fmt: skip
    note = (
        "CPU per delivery in `bench.fanout` is about the socket write plus the Python path, "
        "plus the loop's wake-ups and the kernel's work on the reader's side of loopback."
    )
    return Report(name, "The floor under CPU per delivery", "python -m bench.floor", figures,
                  rows, notes=[note], moment=moment.finish())  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.floor", description=__doc__)
    parser.add_argument("--quick", action="store_true")
    run(parser.parse_args().quick)


if __name__ == "__main__":
    main()
