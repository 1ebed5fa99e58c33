"""A proxy that passes plain HTTP and refuses WebSockets, as some corporate proxies do: it answers
a request to upgrade with 403 and a page of its own (every one, or the first ``refusals``), and
forwards every other request."""

from __future__ import annotations

import asyncio
import re

from tests.client_py.proxy import Proxy

UPGRADE = re.compile(rb"(?im)^upgrade:[ \t]*websocket[ \t]*\r?$")
CONNECTION = re.compile(rb"(?im)^connection:[^\r\n]*\r\n")
REFUSAL = (
    b"HTTP/1.1 403 Forbidden\r\nContent-Type: text/html\r\nContent-Length: 24\r\n"
    b"Connection: close\r\n\r\n<h1>No WebSockets</h1>\r\n"
)


class NoWebSocketProxy(Proxy):
    def __init__(self, target_port: int, refusals: int | None = None) -> None:
        super().__init__(target_port)
        self.refused = 0
        """Upgrades answered 403."""
        self.refusals = refusals
        """Upgrades to refuse, the first ones; every one when None."""

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            writer.transport.abort()
            return
        upgrade = UPGRADE.search(head)
        if upgrade and (self.refusals is None or self.refused < self.refusals):
            self.refused += 1
            writer.write(REFUSAL)
            await writer.drain()
            writer.close()
            return
        # One request per connection: the next one, an upgrade perhaps, comes on a connection
        # of its own and is seen here.
        if not upgrade:
            head = CONNECTION.sub(b"", head)[:-2] + b"Connection: close\r\n\r\n"
        replay = asyncio.StreamReader()
        replay.feed_data(head)
        forwarding = asyncio.create_task(self._forward(reader, replay))
        try:
            await super()._accept(replay, writer)
        finally:
            forwarding.cancel()

    @staticmethod
    async def _forward(reader: asyncio.StreamReader, replay: asyncio.StreamReader) -> None:
        """The rest of the client's bytes (a request's body) behind the rewritten head."""
        try:
            while data := await reader.read(65536):
                replay.feed_data(data)
        except ConnectionError:
            pass
        replay.feed_eof()
