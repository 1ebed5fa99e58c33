"""A TCP proxy in front of a gateway, in the test's event loop: the fault injected at the
protocol's edge (a connection reset, answers that never arrive, a gateway out of reach) while
the client and the gateway on either side are the real ones; and what the clients sent."""

from __future__ import annotations

import asyncio
import contextlib


class Proxy:
    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.down = False
        """Refuse new connections (close them at once), as a gateway out of reach."""
        self.swallow = False
        """Drop whatever the gateway sends: answers that are lost on the way."""
        self.stall = False
        """Read nothing from the gateway until cleared, as a client that stopped reading: the
        gateway's sends block once the connection's buffers are full."""
        self.connections = 0
        self.sent = bytearray()
        """Every byte the clients sent, in the order read: their requests, to look at."""
        self.answered = bytearray()
        """Every byte the gateway sent that was passed on: its answers."""
        self._writers: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._server: asyncio.Server | None = None
        self.url = ""

    async def start(self) -> Proxy:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    def cut(self) -> None:
        """Reset every open connection, both ways."""
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()

    async def close(self) -> None:
        self.cut()
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.down:
            writer.transport.abort()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.transport.abort()
            return
        self.connections += 1
        self._writers |= {writer, up_writer}
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            await asyncio.gather(
                self._pipe(reader, up_writer, False), self._pipe(up_reader, writer, True)
            )
        finally:
            self._tasks.discard(task)

    async def _pipe(
        self, source: asyncio.StreamReader, sink: asyncio.StreamWriter, from_gateway: bool
    ) -> None:
        try:
            while True:
                while from_gateway and self.stall:
                    await asyncio.sleep(0.01)
                data = await source.read(65536)
                if not data:
                    break
                if from_gateway and self.swallow:
                    continue
                (self.answered if from_gateway else self.sent).extend(data)
                sink.write(data)
                await sink.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            self._writers.discard(sink)
            with contextlib.suppress(Exception):
                sink.transport.abort()
