"""``transport="auto"``: the WebSocket, and Server-Sent Events where no WebSocket can be had.

The client falls back once and for good, when a handshake fails in a way that says WebSockets
do not get through (``connection.refused_handshake``: an HTTP answer other than 101 and 401,
the connection dropped at the upgrade, or no answer within the connect timeout) before any
socket ever opened, and a plain HTTP request to the gateway (``GET /healthz``) is answered,
twice in a row: a gateway that restarts can drop a handshake and answer the request made just
after it, and one refusal would then move the client off WebSockets for good. Otherwise it
stays on the WebSocket and keeps reconnecting: the gateway is out of reach, or was reached
once and is away for now.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from liveviews.client._aiohttp import aiohttp
from liveviews.client.connection import Connection, FallBack
from liveviews.client.sse import SseTransport
from liveviews.client.subscription import Subscription
from liveviews.client.transport import ClientState, Transport, TransportName
from liveviews.log.events import Offset

log = logging.getLogger("liveviews.client")


async def gateway_answers(session: aiohttp.ClientSession, url: str, timeout: float) -> bool:
    """Whether plain HTTP reaches the gateway: ``GET /healthz`` answers its ``{"status": "ok"}``
    (not a proxy's page of its own)."""
    try:
        async with session.get(
            url + "/healthz", timeout=aiohttp.ClientTimeout(total=timeout)
        ) as response:
            body = await response.json(content_type=None) if response.status == 200 else None
    except (aiohttp.ClientError, OSError, TimeoutError, ValueError):
        return False
    return isinstance(body, dict) and body.get("status") == "ok"


def why(cause: BaseException) -> str:
    """A failed handshake in a few words (aiohttp's own message repeats every header)."""
    if isinstance(cause, aiohttp.WSServerHandshakeError):
        return f"the upgrade was answered HTTP {cause.status}"
    if isinstance(cause, TimeoutError):
        return "the upgrade was not answered in time"
    return f"the connection dropped at the upgrade: {type(cause).__name__}"


class Fallback:
    """The WebSocket transport until it falls back, then the SSE transport; the subscriptions'
    owner throughout, so that they need not know which carries them."""

    def __init__(
        self,
        websocket: Callable[[FallBack], Connection],
        sse: Callable[[], SseTransport],
        probe: Callable[[], Awaitable[bool]],
    ) -> None:
        self._websocket = websocket(self._fall_back)
        self._sse = sse
        self._probe = probe
        self._answered = False  # HTTP answered after the last refused handshake
        self.current: Transport = self._websocket

    async def _fall_back(self, cause: BaseException) -> bool:
        # Runs in the connection's task: closing the client cancels it, and with it this.
        if not await self._probe():
            self._answered = False
            return False  # not even HTTP gets through: an outage, retried on the WebSocket
        if not self._answered:
            self._answered = True
            return False  # perhaps a gateway back from a restart: one more handshake first
        log.warning(
            "no WebSocket could be opened (%s) but HTTP gets through: following the "
            "subscriptions over Server-Sent Events",
            why(cause),
        )
        sse = self._sse()
        for sub in self._websocket.hand_over():
            sse.attach(sub)
        self.current = sse
        return True

    @property
    def name(self) -> TransportName:
        return self.current.name

    @property
    def state(self) -> ClientState:
        return self.current.state

    @property
    def can_publish(self) -> bool:
        return self.current.can_publish

    def attach(self, sub: Subscription) -> None:
        self.current.attach(sub)

    def detach(self, sub: Subscription) -> None:
        self.current.detach(sub)

    def wait(self, sub: Subscription, offsets: list[Offset]) -> None:
        self.current.wait(sub, offsets)

    async def publish(self, events: Sequence[Any], idempotency_key: str) -> list[Offset]:
        return await self.current.publish(events, idempotency_key)

    async def close(self) -> None:
        await self.current.close()
