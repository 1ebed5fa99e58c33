"""What carries a client's subscriptions to the gateway, whichever way it goes: one WebSocket
for all of them (``connection.py``), one Server-Sent Events stream each (``sse.py``), or the
WebSocket until it turns out that none can be opened, then SSE (``fallback.py``)."""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Any, Literal, Protocol

from liveviews.client.subscription import Subscription
from liveviews.log.events import Offset

TransportName = Literal["websocket", "sse"]
TransportChoice = Literal["auto", "websocket", "sse"]
TRANSPORTS: tuple[TransportChoice, ...] = ("auto", "websocket", "sse")
REFRESH_MARGIN = 60.0
"""Refresh a token this long before it expires (at most a fifth of its remaining life)."""


class ClientState(enum.StrEnum):
    DISCONNECTED = "disconnected"
    CONNECTING = "connecting"
    CONNECTED = "connected"
    CLOSED = "closed"


class Tokens(Protocol):
    """Where a transport gets its token (the client)."""

    @property
    def can_refresh(self) -> bool: ...

    async def token(self, *, refresh: bool = False, instead_of: str | None = None) -> str: ...


class Transport(Protocol):
    """A transport, as the client and its subscriptions (their owner) use it."""

    @property
    def name(self) -> TransportName: ...

    @property
    def state(self) -> ClientState: ...

    @property
    def can_publish(self) -> bool:
        """Whether ``publish`` may be called now; else the client publishes over HTTP."""
        ...

    def attach(self, sub: Subscription) -> None: ...

    def detach(self, sub: Subscription) -> None: ...

    def wait(self, sub: Subscription, offsets: list[Offset]) -> None: ...

    async def publish(self, events: Sequence[Any], idempotency_key: str) -> list[Offset]: ...

    async def close(self) -> None: ...
