"""``Client``: a connection to one Liveviews gateway, its subscriptions, and publishing.

    async with Client("http://127.0.0.1:8000", token=...) as client:
        sub = client.subscribe("profiles", "alice")
        async for change in sub:
            print(change.kind, sub.rows)

Every subscription of a client shares one WebSocket (``connection.py``), or, where none can be
had, each has a Server-Sent Events stream of its own (``sse.py``; ``fallback.py`` says when
``transport="auto"`` falls back). Publish goes over the socket when it is open and over HTTP
otherwise, each batch under an idempotency key.
"""

from __future__ import annotations

import asyncio
import inspect
import re
import secrets
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any, overload
from urllib.parse import urlsplit

import orjson

from liveviews.client._aiohttp import aiohttp
from liveviews.client.backoff import MAX_DELAY, MIN_DELAY, Backoff, full_jitter
from liveviews.client.connection import Connection, FallBack
from liveviews.client.errors import (
    ClientStateError,
    ConnectionLost,
    GatewayError,
    LiveviewsClientError,
    ProtocolError,
    http_error,
    is_token_error,
)
from liveviews.client.fallback import Fallback, gateway_answers
from liveviews.client.frames import decode_offsets
from liveviews.client.group import Group, parse_members
from liveviews.client.query import Cursor, Query, parse_query
from liveviews.client.shapes import PrefixSubscription, WindowSubscription
from liveviews.client.sse import SseTransport
from liveviews.client.subscription import Subscription
from liveviews.client.transport import (
    TRANSPORTS,
    ClientState,
    Transport,
    TransportChoice,
    TransportName,
)
from liveviews.client.types import TokenProvider
from liveviews.log.events import Offset

IDEMPOTENCY_KEY = re.compile(r"[\x21-\x7e]{1,200}")
"""What the gateway takes as an idempotency key (docs/PROTOCOL.md, section 2)."""
RESEND_CODES = frozenset({"store_unavailable", "store_full", "partial_append", "not_replicated"})
"""Refusals of a publish that decided nothing about the batch: sent again under its key, it
may go through (over HTTP they come as 5xx)."""


def worth_resending(error: LiveviewsClientError) -> bool:
    """Whether a failed publish may be sent again with its key: its answer was lost, or the
    gateway or the store could not take it just then. A rate limit (429) is the caller's."""
    if isinstance(error, ConnectionLost):
        return True
    if not isinstance(error, GatewayError):
        return False
    return (error.status is not None and error.status >= 500) or error.code in RESEND_CODES


class Client:
    """A client of the gateway at ``url``, used as ``async with Client(url, ...) as client``.

    ``token`` is a bearer token; or ``token_provider``, a callable (async or not) that returns
    one, called again whenever the token is about to expire or was refused. ``min_delay`` and
    ``max_delay`` bound the reconnect delays (seconds, full jitter); a connection with nothing
    heard for ``heartbeat_timeout`` seconds is dead, and one not open within
    ``connect_timeout`` seconds failed; a publish whose answer was lost is sent again under its
    key up to ``publish_retries`` times.

    ``transport`` says how the subscriptions travel: ``"websocket"``, all on one socket;
    ``"sse"``, each on a Server-Sent Events stream of its own (``GET .../live``), for networks
    that pass no WebSocket; ``"auto"`` (the default), the WebSocket, falling back to SSE for
    good when a handshake fails before any socket ever opened -- answered with an HTTP status
    other than 101 and 401 (a proxy's 403, 502, ...), its connection dropped at the upgrade, or
    not answered within ``connect_timeout`` -- while ``GET /healthz`` on the same url is
    answered by the gateway. Otherwise (the gateway is out of reach, or a socket opened once)
    it stays on the WebSocket and keeps reconnecting, as ``"websocket"`` always does.
    ``client.transport`` says which is in use.
    """

    def __init__(
        self,
        url: str,
        *,
        token: str | None = None,
        token_provider: TokenProvider | None = None,
        min_delay: float = MIN_DELAY,
        max_delay: float = MAX_DELAY,
        heartbeat_timeout: float = 45.0,
        connect_timeout: float = 10.0,
        publish_retries: int = 3,
        transport: TransportChoice = "auto",
    ) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(
                f"Client needs the gateway's http(s) url, e.g. http://127.0.0.1:8000, not {url!r}"
            )
        if (token is None) == (token_provider is None):
            raise ValueError("give token= or token_provider=, one of them")
        if publish_retries < 0:
            raise ValueError("publish_retries is a whole number of retries, 0 or more")
        if transport not in TRANSPORTS:
            raise ValueError(f"transport is one of {', '.join(TRANSPORTS)}, not {transport!r}")
        self.url = url.rstrip("/")
        self.ws_url = (
            ("wss" if parts.scheme == "https" else "ws") + self.url[len(parts.scheme) :] + "/v1/ws"
        )
        self._static_token = token
        self._provider = token_provider
        self._token: str | None = None
        self._token_lock = asyncio.Lock()
        self._delays = (min_delay, max_delay)
        self._heartbeat_timeout = heartbeat_timeout
        self._connect_timeout = connect_timeout
        self.publish_retries = publish_retries
        self._choice = transport
        self._session: aiohttp.ClientSession | None = None
        self._transport: Transport | None = None
        self._closed = False

    async def __aenter__(self) -> Client:
        if self._session is not None or self._closed:
            raise ClientStateError("a Client is entered once")
        # No cap on the pool: over SSE each subscription holds a connection for as long as it
        # lives, and aiohttp's default of 100 would hold the 101st back.
        self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        if self._choice == "sse":
            self._transport = self._sse()
        elif self._choice == "websocket":
            self._transport = self._websocket(None)
        else:
            session, url, timeout = self._session, self.url, self._connect_timeout
            self._transport = Fallback(
                self._websocket, self._sse, lambda: gateway_answers(session, url, timeout)
            )
        return self

    def _websocket(self, fall_back: FallBack | None) -> Connection:
        assert self._session is not None
        return Connection(
            self.ws_url,
            self._session,
            self,
            Backoff(*self._delays),
            self._heartbeat_timeout,
            self._connect_timeout,
            fall_back,
        )

    def _sse(self) -> SseTransport:
        assert self._session is not None
        return SseTransport(
            self.url,
            self._session,
            self,
            self._delays,
            self._heartbeat_timeout,
            self._connect_timeout,
        )

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    @property
    def state(self) -> ClientState:
        """``disconnected`` (no socket now; over SSE, no stream open), ``connecting``,
        ``connected`` (over SSE, every stream open) or ``closed``."""
        if self._closed:
            return ClientState.CLOSED
        return self._transport.state if self._transport else ClientState.DISCONNECTED

    @property
    def transport(self) -> TransportName:
        """The transport in use: ``"websocket"`` or ``"sse"``. With ``transport="auto"`` it is
        ``"websocket"`` until the client falls back."""
        if self._transport is not None:
            return self._transport.name
        return "sse" if self._choice == "sse" else "websocket"

    @overload
    def subscribe(self, view: str, key: str) -> Subscription: ...

    @overload
    def subscribe(
        self, view: str, *, prefix: str, filter: Mapping[str, Any] | None = None
    ) -> PrefixSubscription: ...

    @overload
    def subscribe(
        self, view: str, key: str, *, limit: int, after: Cursor | tuple[float, str] | None = None
    ) -> WindowSubscription: ...

    def subscribe(
        self,
        view: str,
        key: str | None = None,
        *,
        prefix: str | None = None,
        limit: int | None = None,
        after: Cursor | tuple[float, str] | None = None,
        filter: Mapping[str, Any] | None = None,
    ) -> Subscription:
        """Follow one key (``subscribe(view, key)``), the keys of a listable view that start with
        a prefix (``subscribe(view, prefix="board1/")``; ``""``: every key), of which only the
        rows that match a filter with ``filter={"field": "assignee", "eq": "ada"}``
        (docs/PROTOCOL.md, section 5.2), or a window of a ranked view's key: its ``limit`` top
        rows, after the row ``after`` names (a page)."""
        query = parse_query(view, key, prefix=prefix, limit=limit, after=after, filter=filter)
        return self._follow(query)

    def group(self, members: Sequence[tuple[str, str]]) -> Group:
        """Follow several keys as one group (docs/PROTOCOL.md, section 5.3): ``members`` is a
        list of (view, key), released together, so that nothing reads one of them reflecting a
        write another does not reflect yet. Over WebSocket the group shares the socket; over
        SSE it is one stream (``GET /v1/groups/live``), however many members it has."""
        transport = self._require_open("group")
        sub = Group(transport, parse_members(members))
        transport.attach(sub)
        return sub

    def _follow(self, query: Query) -> Subscription:
        """What ``subscribe`` does with its checked query, of any shape (``sync`` calls it)."""
        transport = self._require_open("subscribe")
        shape = {"key": Subscription, "prefix": PrefixSubscription, "window": WindowSubscription}
        sub = shape[query.shape](transport, query)
        transport.attach(sub)
        return sub

    async def publish(
        self, events: Sequence[Mapping[str, Any]], *, idempotency_key: str | None = None
    ) -> list[Offset]:
        """Append ``events`` (``{"type", "payload", "time"?}`` each) all or nothing, and once: the
        offset of each, in order.

        The batch goes under an idempotency key (``idempotency_key``, or a new one). When its
        answer is lost or the gateway could not take it just then, it is sent again under that
        key, up to ``publish_retries`` times: the gateway appends it at most once. An error
        that ends the publish carries the key as ``idempotency_key``."""
        transport = self._require_open("publish")
        batch = list(events)
        if not batch:
            raise ValueError("publish needs at least one event")
        key = secrets.token_hex(16) if idempotency_key is None else idempotency_key
        if not isinstance(key, str) or not IDEMPOTENCY_KEY.fullmatch(key):
            raise ValueError(
                "an idempotency key is 1 to 200 visible ASCII characters, such as a UUID"
            )
        attempt = 0
        while True:
            try:
                if transport.can_publish:
                    return await transport.publish(batch, key)
                return await self._http_publish(batch, key)
            except LiveviewsClientError as error:
                error.idempotency_key = key
                if not worth_resending(error) or attempt >= self.publish_retries or self._closed:
                    raise
            await asyncio.sleep(full_jitter(attempt, *self._delays))
            attempt += 1

    async def close(self) -> None:
        """Close every subscription (their iterators end) and the connections, for good."""
        if self._closed:
            return
        self._closed = True
        if self._transport is not None:
            await self._transport.close()
        if self._session is not None:
            await self._session.close()

    # ---- tokens: what the transports ask ---------------------------------------------------

    @property
    def can_refresh(self) -> bool:
        return self._provider is not None

    async def token(self, *, refresh: bool = False, instead_of: str | None = None) -> str:
        """The token to send; a new one from the provider when ``refresh`` or none yet. With
        ``instead_of``, the token to replace, only if it is still the one held: the streams that
        all see one token expire make one call of the provider, not one each."""
        if self._provider is None:
            assert self._static_token is not None
            return self._static_token
        async with self._token_lock:  # one call of the provider for everyone who asks at once
            stale = refresh and (instead_of is None or instead_of == self._token)
            if stale or self._token is None:
                answer = self._provider()
                token = await answer if inspect.isawaitable(answer) else answer
                if not isinstance(token, str) or not token:
                    raise ValueError("token_provider must return a token string")
                self._token = token
            return self._token

    # ---- HTTP ---------------------------------------------------------------------------------

    def _require_open(self, what: str) -> Transport:
        if self._closed:
            raise ClientStateError(f"cannot {what} on a closed client")
        if self._transport is None:
            raise ClientStateError(f"{what} inside `async with Client(...) as client:`")
        return self._transport

    async def _http_publish(self, events: list[Mapping[str, Any]], key: str) -> list[Offset]:
        body = await self._request(
            "POST",
            "/v1/events",
            orjson.dumps({"events": events}),
            {"Idempotency-Key": key, "Content-Type": "application/json"},
        )
        if not isinstance(body, dict):
            raise ProtocolError("a publish answer must be a JSON object")
        return decode_offsets(body.get("offsets"))

    async def _request(
        self, method: str, path: str, data: bytes | None, headers: dict[str, str]
    ) -> Any:
        assert self._session is not None
        for refresh in (False, True):
            token = await self.token(refresh=refresh)
            sent = {**headers, "Authorization": f"Bearer {token}"}
            try:
                async with self._session.request(
                    method, self.url + path, data=data, headers=sent
                ) as response:
                    text = await response.read()
                    status = response.status
            except (aiohttp.ClientError, OSError, TimeoutError) as exc:
                raise ConnectionLost(f"could not reach the gateway: {exc!r}") from exc
            if 200 <= status < 300:
                return _json_or_none(text)
            error = http_error(status, text)
            if not (is_token_error(error) and self.can_refresh and not refresh):
                raise error
        raise AssertionError("unreachable")


def _json_or_none(text: bytes) -> Any:
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
