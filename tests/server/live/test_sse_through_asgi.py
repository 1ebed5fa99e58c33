"""An SSE stream that cannot take its connection over is served through plain ASGI.

That happens under another HTTP protocol than the gateway's own (uvicorn's h11 here), and under
the gateway's own protocol when the client pipelined a request behind the stream's: the
connection cannot be handed to the stream while a request waits on it. Either way the stream
must carry the same frames: snapshot, deltas, heartbeats, and its end when the token expires;
and the log feed, served by the same loop, its entries, heartbeats and end.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import aiohttp
import pytest

from tests.support.gateway import ServedGateway, Writer, open_sse, wait_for
from tests.support.gateway_settings import settings_for


@pytest.fixture(scope="module")
def h11_gateway(store_url: str) -> Iterator[ServedGateway]:
    served = ServedGateway(settings_for(store_url), http="h11").start()
    yield served
    served.stop()


async def test_a_stream_under_another_http_protocol_carries_every_frame(
    h11_gateway: ServedGateway, writer: Writer
) -> None:
    gw = h11_gateway

    async with aiohttp.ClientSession() as s:
        sse = await open_sse(s, gw.url + "/v1/views/profiles/h11/live",
                             gw.headers(ttl=4))  # fmt: skip
        assert (await sse.next()).event == "snapshot"
        assert "ReleasedConnection" not in gw.connection_kinds()
        writer.write([("profiles", "h11", "name", {"v": 1})])
        delta = await sse.next(skip=("progress",))
        assert (delta.event, delta.data["ops"][0]["value"]) == ("delta", {"v": 1})
        await sse.heartbeat(timeout=5)
        end = await sse.next(timeout=10, skip=("progress",))
        assert (end.event, end.data["code"]) == ("end", "token_expired")
        assert end.data["last_event_id"] == delta.id
        await sse.close()
    await wait_for(lambda: gw.gateway.metrics.subscriptions == 0, timeout=5)
    assert gw.gateway.metrics.sse_connections == 0


async def test_the_log_feed_under_another_http_protocol_keeps_the_same_rules(
    h11_gateway: ServedGateway,
) -> None:
    gw = h11_gateway
    event = {"type": "profile_set", "payload": {"user": "alice", "name": "A"}}
    async with aiohttp.ClientSession() as s:
        sse = await open_sse(s, gw.url + "/v1/log/live", gw.headers(ttl=4), {"recent": "0"})
        assert "ReleasedConnection" not in gw.connection_kinds()
        resp = await s.post(gw.url + "/v1/events", json=event, headers=gw.headers())
        assert resp.status == 202
        offset = (await resp.json())["offsets"][0]
        entry = await sse.next()
        assert (entry.event, entry.data["id"]) == ("log", offset["id"])
        await sse.heartbeat(timeout=5)
        end = await sse.next(timeout=10)
        assert (end.event, end.data["code"], end.data["last_event_id"]) == (
            "end", "token_expired", None,
        )  # fmt: skip
        await sse.close()
    await wait_for(lambda: gw.gateway.metrics.sse_connections == 0, timeout=5)
    assert gw.gateway.log_feed is not None and not gw.gateway.log_feed.readers


async def test_a_stream_with_a_request_pipelined_behind_it_is_served_through_asgi(
    gateway: ServedGateway, writer: Writer
) -> None:
    reader, stream = await asyncio.open_connection("127.0.0.1", gateway.settings.port)
    auth = gateway.headers()["Authorization"]
    request = (f"GET /v1/views/profiles/piped/live HTTP/1.1\r\nHost: x\r\n"
               f"Authorization: {auth}\r\n\r\n").encode()  # fmt: skip
    stream.write(request + b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    await stream.drain()
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    assert head.startswith(b"HTTP/1.1 200"), head
    body = b""
    while b"event: snapshot" not in body:
        body += await asyncio.wait_for(reader.read(65536), 10)
    assert "ReleasedConnection" not in gateway.connection_kinds()
    writer.write([("profiles", "piped", "name", {"v": "behind"})])
    while b"behind" not in body:
        body += await asyncio.wait_for(reader.read(65536), 10)
    assert b"event: delta" in body
    stream.close()
    await wait_for(lambda: gateway.gateway.metrics.subscriptions == 0, timeout=5)
