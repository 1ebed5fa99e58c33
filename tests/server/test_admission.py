"""The connection budgets (``liveviews.gateway.admission``): slots for signed-in connections, a separate
small budget for WebSockets that have not signed in, and caps per subject and per address.

Bugs: a WebSocket took a connection slot before any token was checked and held it up to the
sign-in deadline (and as long again if it ignored the close), so a few hundred tokenless
handshakes a second kept every slot full and signed-in readers got 503; and one token, or one
address, could hold every slot. Fix: a socket without a token waits in ``LV_MAX_UNAUTHENTICATED``
and takes a slot only once signed in; a socket that never signs in is dropped at its deadline
whether or not it answers the close; ``LV_MAX_CONNECTIONS_PER_SUBJECT`` and
``LV_MAX_CONNECTIONS_PER_ADDRESS`` cap what one user and one address hold (429).

Client addresses are set with ``X-Forwarded-For``, which the gateway's uvicorn takes from a
proxy it trusts (``FORWARDED_ALLOW_IPS``, by default the loopback the tests connect from).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import socket
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiohttp
import pytest

from tests.support.gateway import ServedGateway, wait_for
from tests.support.gateway_settings import settings_for

MAX_CONNECTIONS = 6
MAX_UNAUTHENTICATED = 4
PER_SUBJECT = 3
PER_ADDRESS = 5


@pytest.fixture(scope="module")
def budgets(store_url: str) -> Iterator[ServedGateway]:
    served = ServedGateway(settings_for(
        store_url,
        LV_MAX_CONNECTIONS=str(MAX_CONNECTIONS),
        LV_MAX_UNAUTHENTICATED=str(MAX_UNAUTHENTICATED),
        LV_MAX_CONNECTIONS_PER_SUBJECT=str(PER_SUBJECT),
        LV_MAX_CONNECTIONS_PER_ADDRESS=str(PER_ADDRESS),
        LV_WS_AUTH_TIMEOUT_SECONDS="30",
    )).start()  # fmt: skip
    yield served
    served.stop()


@pytest.fixture()
async def gw(budgets: ServedGateway) -> AsyncIterator[ServedGateway]:
    """The gateway with nothing open, before and after each test."""
    metrics = budgets.gateway.metrics

    def idle() -> bool:
        return metrics.connections == 0 and getattr(metrics, "ws_unauthenticated", 0) == 0

    await wait_for(idle)
    yield budgets
    await wait_for(idle)


def at(address: str) -> dict[str, str]:
    return {"X-Forwarded-For": address}


async def live(s: aiohttp.ClientSession, gw: ServedGateway, user: str, address: str,
               key: str = "k") -> aiohttp.ClientResponse:  # fmt: skip
    return await s.get(f"{gw.url}/v1/views/likes/{key}/live",
                       headers={**gw.headers(user), **at(address)})  # fmt: skip


async def first_message(ws: aiohttp.ClientWebSocketResponse) -> dict[str, Any]:
    """The socket's next message but heartbeats; ``closed`` with its code if it closed."""
    while True:
        m = await asyncio.wait_for(ws.receive(), 10)
        if m.type != aiohttp.WSMsgType.TEXT:
            return {"type": "closed", "code": ws.close_code}
        msg: dict[str, Any] = json.loads(m.data)
        if msg["type"] != "heartbeat":
            return msg


async def closed_with(ws: aiohttp.ClientWebSocketResponse) -> int | None:
    while (await asyncio.wait_for(ws.receive(), 10)).type == aiohttp.WSMsgType.TEXT:
        pass
    return ws.close_code


async def test_a_flood_of_tokenless_handshakes_leaves_signed_in_readers_their_slots(
    gw: ServedGateway,
) -> None:
    async with aiohttp.ClientSession() as s, contextlib.AsyncExitStack() as held:
        waiting, refused = [], []
        for i in range(5 * MAX_CONNECTIONS):
            ws = await s.ws_connect(gw.ws_url, headers=at(f"192.0.2.{i}"))
            held.push_async_callback(ws.close)
            # Refused at once, or accepted: then only heartbeats (every second) until it signs in.
            m = json.loads((await asyncio.wait_for(ws.receive(), 10)).data)
            if m["type"] == "heartbeat":
                waiting.append(ws)
            else:
                refused.append((m.get("code"), await closed_with(ws)))
        # Every slot is still there for readers who sign in.
        streams = [await live(s, gw, f"reader{i}", f"198.51.100.{i}")
                   for i in range(MAX_CONNECTIONS - 1)]  # fmt: skip
        for r in streams:
            held.callback(r.close)
        assert [r.status for r in streams] == [200] * (MAX_CONNECTIONS - 1)
        assert len(waiting) == MAX_UNAUTHENTICATED
        assert set(refused) == {("too_many_unauthenticated", 1013)}
        assert gw.gateway.metrics.ws_unauthenticated == MAX_UNAUTHENTICATED
        signed_in = await s.ws_connect(gw.ws_url, params={"access_token": gw.token("ws")},
                                       headers=at("198.51.100.99"))  # fmt: skip
        held.push_async_callback(signed_in.close)
        assert (await first_message(signed_in))["type"] == "authenticated"
        assert gw.gateway.metrics.connections == MAX_CONNECTIONS
        # A socket that signs in now finds every slot taken, and is told so.
        await waiting[0].send_str(json.dumps({"type": "auth", "token": gw.token("late")}))
        m = await first_message(waiting[0])
        assert (m["type"], m["code"]) == ("error", "too_many_connections")
        assert await closed_with(waiting[0]) == 1013
        await wait_for(lambda: gw.gateway.metrics.ws_unauthenticated == MAX_UNAUTHENTICATED - 1)


async def test_signing_in_moves_a_socket_from_the_waiting_budget_to_a_slot(
    gw: ServedGateway,
) -> None:
    metrics = gw.gateway.metrics
    async with aiohttp.ClientSession() as s:
        ws = await s.ws_connect(gw.ws_url, headers=at("192.0.2.200"))
        await wait_for(lambda: metrics.ws_unauthenticated == 1)
        assert metrics.ws_connections == 0
        await ws.send_str(json.dumps({"type": "auth", "token": gw.token("alice")}))
        assert (await first_message(ws))["type"] == "authenticated"
        assert (metrics.ws_unauthenticated, metrics.ws_connections) == (0, 1)
        await ws.close()


async def test_one_subject_holds_at_most_its_share_of_the_connections(gw: ServedGateway) -> None:
    async with aiohttp.ClientSession() as s:
        mine = [await live(s, gw, "alice", f"198.51.100.{i}") for i in range(PER_SUBJECT)]
        assert [r.status for r in mine] == [200] * PER_SUBJECT
        over = await live(s, gw, "alice", "198.51.100.50")
        body = await over.json()
        assert (over.status, body["code"]) == (429, "too_many_connections_per_subject")
        assert body["message"].endswith(".")
        ws = await s.ws_connect(gw.ws_url, params={"access_token": gw.token("alice")},
                                headers=at("198.51.100.51"))  # fmt: skip
        m = await first_message(ws)
        assert (m["type"], m["code"]) == ("error", "too_many_connections_per_subject")
        assert await closed_with(ws) == 1013
        other = await live(s, gw, "bob", "198.51.100.52")
        assert other.status == 200
        # Closing one gives the subject its place back.
        mine.pop().close()
        await wait_for(lambda: gw.gateway.admission.per_subject.get("alice") == PER_SUBJECT - 1)
        again = await live(s, gw, "alice", "198.51.100.53")
        assert again.status == 200
        for r in [*mine, other, again]:
            r.close()


async def test_one_address_holds_at_most_its_share_of_the_connections(gw: ServedGateway) -> None:
    async with aiohttp.ClientSession() as s:
        ours = [await live(s, gw, f"user{i}", "203.0.113.5") for i in range(PER_ADDRESS)]
        assert [r.status for r in ours] == [200] * PER_ADDRESS
        over = await live(s, gw, "another", "203.0.113.5")
        body = await over.json()
        assert (over.status, body["code"]) == (429, "too_many_connections_per_address")
        # A WebSocket waiting to sign in counts against its address too.
        ws = await s.ws_connect(gw.ws_url, headers=at("203.0.113.5"))
        m = await first_message(ws)
        assert (m["type"], m["code"]) == ("error", "too_many_connections_per_address")
        assert await closed_with(ws) == 1013
        elsewhere = await live(s, gw, "another", "203.0.113.6")
        assert elsewhere.status == 200
        for r in [*ours, elsewhere]:
            r.close()


AUTH_TIMEOUT = 1.0


@pytest.fixture(scope="module")
def deadline(store_url: str) -> Iterator[ServedGateway]:
    served = ServedGateway(settings_for(
        store_url, LV_WS_AUTH_TIMEOUT_SECONDS=str(AUTH_TIMEOUT), LV_SEND_TIMEOUT_SECONDS="10",
        LV_HEARTBEAT_SECONDS="1",
    )).start()  # fmt: skip
    yield served
    served.stop()


def test_a_socket_that_never_signs_in_is_dropped_at_its_deadline_though_it_ignores_the_close(
    deadline: ServedGateway,
) -> None:
    """It used to be sent a close and then waited for as long as the send timeout (10 s here);
    now it has a second to answer the close."""
    key = base64.b64encode(os.urandom(16)).decode()
    s = socket.create_connection(("127.0.0.1", deadline.settings.port))
    s.sendall(f"GET /v1/ws HTTP/1.1\r\nHost: gw\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
              f"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: {key}\r\n\r\n".encode())  # fmt: skip
    start = time.monotonic()
    got = b""
    s.settimeout(5 * AUTH_TIMEOUT)
    with contextlib.suppress(TimeoutError, ConnectionResetError):
        while part := s.recv(65536):  # read, but never answer the close
            got += part
    took = time.monotonic() - start
    s.close()
    assert got.startswith(b"HTTP/1.1 101"), got[:200]
    assert b"token_missing" in got
    # The deadline, a second to answer the close, and the ticker's beat (0.5 s here) twice.
    assert took < AUTH_TIMEOUT + 1 + 2 * 0.5 + 0.5, took
    assert deadline.gateway.metrics.ws_unauthenticated == 0


def test_the_sign_in_deadline_holds_when_the_wall_clock_is_set_back(
    deadline: ServedGateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A clock set back an hour (an NTP step, a VM restored) after a socket opened must not
    keep that socket, which never signs in, and its place among those waiting to, for an hour."""
    key = base64.b64encode(os.urandom(16)).decode()
    s = socket.create_connection(("127.0.0.1", deadline.settings.port))
    s.sendall(f"GET /v1/ws HTTP/1.1\r\nHost: gw\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
              f"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: {key}\r\n\r\n".encode())  # fmt: skip
    s.settimeout(5 * AUTH_TIMEOUT)
    got = s.recv(65536)
    assert got.startswith(b"HTTP/1.1 101"), got[:200]  # the socket is open, its deadline set
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() - 3600)
    with contextlib.suppress(TimeoutError, ConnectionResetError):
        while part := s.recv(65536):
            got += part
    s.close()
    assert b"token_missing" in got, got[:300]
