"""Real loopback TCP connections under both event loops the gateway can serve on (uvloop, and
asyncio's own), and readers of what their client side received."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable, Coroutine
from typing import Any, cast

import uvloop

LOOPS: dict[str, Callable[[], asyncio.AbstractEventLoop]] = {
    "uvloop": uvloop.new_event_loop,
    "asyncio": asyncio.new_event_loop,
}


def run_on(loop_name: str, main: Callable[[], Coroutine[Any, Any, None]]) -> None:
    with asyncio.Runner(loop_factory=LOOPS[loop_name]) as runner:
        runner.run(main())


class Accepting(asyncio.Protocol):
    def __init__(self, accepted: asyncio.Future[asyncio.Transport]) -> None:
        self.accepted = accepted

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.accepted.set_result(cast(asyncio.Transport, transport))


async def connected_pair(rcvbuf: int | None = None) -> tuple[asyncio.Transport, socket.socket]:
    """A server-side transport and the plain socket of the client connected to it."""
    loop = asyncio.get_running_loop()
    accepted: asyncio.Future[asyncio.Transport] = loop.create_future()
    server = await loop.create_server(lambda: Accepting(accepted), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    client = socket.socket()
    if rcvbuf is not None:
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    await loop.run_in_executor(None, client.connect, ("127.0.0.1", port))
    transport = await accepted
    server.close()
    return transport, client


def read_exactly(sock: socket.socket, size: int) -> bytes:
    parts: list[bytes] = []
    got = 0
    while got < size:
        part = sock.recv(min(1 << 20, size - got))
        if not part:
            break
        parts.append(part)
        got += len(part)
    return b"".join(parts)


def sse_frames(data: bytes) -> list[bytes]:
    """The SSE frames in an HTTP/1.1 chunked body."""
    body, rest = bytearray(), bytes(data)
    while rest:
        size_line, rest = rest.split(b"\r\n", 1)
        size = int(size_line, 16)
        body += rest[:size]
        assert rest[size : size + 2] == b"\r\n"
        rest = rest[size + 2 :]
    return [f for f in bytes(body).split(b"\n\n") if f]
