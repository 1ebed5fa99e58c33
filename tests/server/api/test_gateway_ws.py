"""The WebSocket endpoint: multiplexed subscriptions, publishing, errors and token refresh."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import redis
from websockets.frames import Close, Frame, Opcode

from liveviews.changes.topic import WANTS_STREAM
from liveviews.gateway.wire.rfc6455 import OP_CLOSE, OP_PING, OP_PONG, OP_TEXT
from liveviews.log.events import log_stream
from liveviews.store.embedded import free_port
from tests.support.gateway import ServedGateway, Writer, stored_rows, wait_for
from tests.support.gateway_settings import settings_for

GOLDEN = Path(__file__).resolve().parents[3] / "protocol" / "golden"


class Socket:
    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws

    async def send(self, **msg: Any) -> None:
        await self.ws.send_str(json.dumps(msg))

    async def next(self, timeout: float = 10, skip: tuple[str, ...] = ("heartbeat", "progress")
                   ) -> dict[str, Any]:  # fmt: skip
        async with asyncio.timeout(timeout):
            while True:
                m = await self.ws.receive()
                if m.type != aiohttp.WSMsgType.TEXT:
                    return {"type": "closed", "code": self.ws.close_code}
                msg: dict[str, Any] = json.loads(m.data)
                if msg["type"] not in skip:
                    return msg


async def connect(s: aiohttp.ClientSession, gw: ServedGateway, token: str | None = None) -> Socket:
    params = {"access_token": token} if token else None
    return Socket(await s.ws_connect(gw.ws_url, params=params))


async def test_one_socket_multiplexes_subscriptions_and_publishes(
    gateway: ServedGateway, store: redis.Redis, writer: Writer
) -> None:
    async with aiohttp.ClientSession() as s:
        sock = await connect(s, gateway, gateway.token("alice"))
        assert (await sock.next())["type"] == "authenticated"
        await sock.send(type="subscribe", sub="a", view="profiles", key="alice")
        await sock.send(type="subscribe", sub="b", view="likes", key="t1")
        snaps = {m["sub"]: m for m in [await sock.next(), await sock.next()]}
        assert {m["type"] for m in snaps.values()} == {"snapshot"}
        assert snaps["b"]["data"]["view"] == "likes"
        writer.write([("profiles", "alice", "profile", {"name": "A"}),
                      ("likes", "t1", "count", {"likes": 1})])  # fmt: skip
        got = {(m["sub"], m["type"]) for m in [await sock.next(), await sock.next()]}
        assert got == {("a", "delta"), ("b", "delta")}

        await sock.send(type="publish", req="r1",
                        events=[{"type": "like", "payload": {"user": "alice",
                                                             "tweet": "bob:1"}}])  # fmt: skip
        published = await sock.next()
        assert published["type"] == "published" and published["req"] == "r1"
        assert published["offsets"][0]["token"].startswith(
            str(published["offsets"][0]["partition"])
        )
        await sock.send(type="publish", req="r2",
                        events=[{"type": "like", "payload": {"user": "bob",
                                                             "tweet": "bob:1"}}])  # fmt: skip
        refused = await sock.next()
        assert (refused["type"], refused["req"]) == ("error", "r2")
        assert refused["code"] == "not_author"
        assert sum(store.xlen(log_stream(p)) for p in range(4)) == 1

        await sock.send(type="unsubscribe", sub="a")
        assert await sock.next() == {"type": "unsubscribed", "sub": "a"}
        writer.write([("profiles", "alice", "profile", {"name": "A2"}),
                      ("likes", "t1", "count", {"likes": 2})])  # fmt: skip
        only = await sock.next()
        assert (only["sub"], only["type"]) == ("b", "delta")
        # Resume "a" from its last id on the same socket: exactly the delta it missed.
        await sock.send(type="subscribe", sub="a", view="profiles", key="alice",
                        last_event_id=snaps["a"]["id"])  # fmt: skip
        first = await sock.next()
        second = await sock.next()
        assert (first["type"], second["type"]) == ("delta", "delta")
        assert second["data"]["ops"][0]["value"] == {"name": "A2"}
        await sock.ws.close()


async def test_bad_messages_get_errors_and_the_socket_stays_open(
    gateway: ServedGateway, store: redis.Redis
) -> None:
    async with aiohttp.ClientSession() as s:
        sock = await connect(s, gateway, gateway.token("alice"))
        await sock.next()
        cases: list[tuple[Any, str]] = [
            ("{not json", "invalid_message"),
            ([1, 2], "invalid_message"),
            ({"type": "dance"}, "invalid_message"),
            ({"type": "subscribe", "sub": "", "view": "profiles", "key": "a"},
             "invalid_message"),
            ({"type": "subscribe", "sub": "x", "view": "nope", "key": "a"}, "unknown_view"),
            ({"type": "subscribe", "sub": "x", "view": "timeline", "key": "bob"}, "forbidden"),
            ({"type": "subscribe", "sub": "x", "view": "profiles", "key": "a",
              "last_event_id": "zz"}, "invalid_last_event_id"),
            ({"type": "unsubscribe", "sub": "never"}, "unknown_subscription"),
            ({"type": "publish", "events": []}, "invalid_message"),
            ({"type": "publish", "req": "r", "events": []}, "empty_batch"),
            ({"type": "publish", "req": "r", "events": [{"type": "x"}]}, "unknown_event_type"),
            ({"type": "publish", "req": "r", "idempotency_key": 7,
              "events": [{"type": "profile_set", "payload": {"user": "alice", "name": "A"}}]},
             "invalid_idempotency_key"),
            ({"type": "publish", "req": "r", "idempotency_key": "has space",
              "events": [{"type": "profile_set", "payload": {"user": "alice", "name": "A"}}]},
             "invalid_idempotency_key"),
        ]  # fmt: skip
        for msg, code in cases:
            await sock.ws.send_str(msg if isinstance(msg, str) else json.dumps(msg))
            answer = await sock.next()
            assert (answer["type"], answer["code"]) == ("error", code), msg
        for i in range(5):
            await sock.send(type="subscribe", sub=f"s{i}", view="profiles", key=f"k{i}")
            assert (await sock.next())["type"] == "snapshot"
        await sock.send(type="subscribe", sub="s0", view="profiles", key="k9")
        assert (await sock.next())["code"] == "sub_in_use"
        await sock.send(type="subscribe", sub="s5", view="profiles", key="k5")
        too_many = await sock.next()
        assert (too_many["code"], too_many["sub"]) == ("too_many_subscriptions", "s5")
        assert sum(store.xlen(log_stream(p)) for p in range(4)) == 0
        await sock.ws.close()


async def test_golden_client_messages_are_understood(
    gateway: ServedGateway, store: redis.Redis
) -> None:
    async with aiohttp.ClientSession() as s:
        sock = await connect(s, gateway)
        auth = json.loads((GOLDEN / "client-auth.json").read_text())["ws"]["text"]
        await sock.ws.send_str(auth.replace("<jwt>", gateway.token("alice")))
        assert (await sock.next())["type"] == "authenticated"
        for name, expect in [("subscribe", "snapshot"), ("unsubscribe", "unsubscribed"),
                             ("publish", "published")]:  # fmt: skip
            text = json.loads((GOLDEN / f"client-{name}.json").read_text())["ws"]["text"]
            await sock.ws.send_str(text)
            assert (await sock.next())["type"] == expect
        await sock.ws.close()


async def test_tokens_are_checked_at_connect_and_can_be_refreshed(
    gateway: ServedGateway, store: redis.Redis, writer: Writer
) -> None:
    async with aiohttp.ClientSession() as s:
        bad = await connect(s, gateway, "not-a-token")
        assert (await bad.next())["code"] == "token_invalid"
        assert (await bad.next())["code"] == 4401
        silent = await connect(s, gateway)  # no token and no auth message in time
        assert (await silent.next(timeout=5))["code"] == "token_missing"
        assert (await silent.next())["code"] == 4401
        unauth = await connect(s, gateway)
        await unauth.send(type="subscribe", sub="a", view="profiles", key="alice")
        assert (await unauth.next())["code"] == "token_missing"

        # A token's expiry is a whole second: ttl=3 leaves it 2 to 3 s, time enough to sign in
        # on a loaded machine, which a token that could expire within the second did not.
        sock = await connect(s, gateway, gateway.token("alice", ttl=3))
        await sock.next()
        await sock.send(type="subscribe", sub="a", view="profiles", key="alice")
        await sock.next()
        await sock.send(type="auth", token=gateway.token("bob"))
        assert (await sock.next())["code"] == "subject_changed"
        await sock.send(type="auth", token=gateway.token("alice", ttl=60))
        assert (await sock.next())["type"] == "authenticated"
        await asyncio.sleep(3.2)  # past the first token's expiry
        writer.write([("profiles", "alice", "profile", {"name": "still here"})])
        delta = await sock.next()
        assert delta["type"] == "delta" and delta["sub"] == "a"
        await sock.ws.close()

        short = await connect(s, gateway, gateway.token("alice", ttl=2))
        assert (await short.next())["type"] == "authenticated"
        assert (await short.next(timeout=6))["code"] == "token_expired"
        assert (await short.next())["code"] == 4401
        assert stored_rows(store, "profiles", "alice", 8)["profile"]["name"] == "still here"


async def test_an_idle_socket_holds_no_task_and_no_uvicorn_protocol(
    gateway: ServedGateway, writer: Writer
) -> None:
    """A socket is accepted through Starlette's middleware and routing, then owns its
    connection (``liveviews.gateway.live.sockets``): an idle socket and its subscriptions cost no task and
    none of uvicorn's WebSocket state, and the hub still writes each delta to it."""

    async with aiohttp.ClientSession() as s:
        before = len(gateway.awaited_files())
        socks = [await connect(s, gateway, gateway.token("alice")) for _ in range(10)]
        for i, sock in enumerate(socks):
            assert (await sock.next())["type"] == "authenticated"
            await sock.send(type="subscribe", sub="a", view="profiles", key=f"idle{i}")
            await sock.send(type="subscribe", sub="b", view="profiles", key="idle-both")
            for _ in range(2):
                assert (await sock.next())["type"] == "snapshot"
        # At most the two tasks the ticker starts with the first stream or socket. A wake that
        # came with the snapshots (a frontier handed out meanwhile) makes a sender's task for a
        # moment, on a slow machine still unstarted when it is looked at: wait for those to end.
        with contextlib.suppress(AssertionError):  # the assertion below says which stayed
            await wait_for(lambda: len(gateway.awaited_files()) - before <= 2, timeout=5)
        during = gateway.awaited_files()
        assert len(during) - before <= 2, during
        assert not [t for t in during if any("server/ws" in f for f in t)], during
        kinds = gateway.connection_kinds()
        assert kinds.count("OwnedSocket") == 10, kinds
        writer.write([("profiles", f"idle{i}", "name", {"v": i}) for i in range(10)])
        for i, sock in enumerate(socks):
            m = await sock.next()
            assert (m["type"], m["sub"], m["data"]["key"]) == ("delta", "a", f"idle{i}"), m
        writer.write([("profiles", "idle-both", "name", {"v": "both"})])
        for sock in socks:
            m = await sock.next()
            assert (m["type"], m["sub"], m["data"]["key"]) == ("delta", "b", "idle-both"), m
        for sock in socks:
            await sock.ws.close()
        await wait_for(lambda: gateway.gateway.metrics.subscriptions == 0, timeout=5)
        assert "OwnedSocket" not in gateway.connection_kinds()
        assert gateway.gateway.metrics.ws_connections == 0


async def raw_socket(gw: ServedGateway) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A signed-in WebSocket on a plain socket, its handshake answered."""
    host, port = gw.url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    key = base64.b64encode(os.urandom(16)).decode()
    writer.write(f"GET /v1/ws?access_token={gw.token('alice')} HTTP/1.1\r\nHost: x\r\n"
                 "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
                 f"Sec-WebSocket-Key: {key}\r\n\r\n".encode())  # fmt: skip
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    assert head.startswith(b"HTTP/1.1 101"), head
    return reader, writer


async def read_frame(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    """(opcode, payload) of the server's next frame; (-1, b"") at the end of the connection."""
    async with asyncio.timeout(10):
        try:
            b0, b1 = await reader.readexactly(2)
        except asyncio.IncompleteReadError:
            return -1, b""
        assert b0 & 0x80 and not b1 & 0x80, (b0, b1)  # final, unmasked
        size = b1 & 0x7F
        if size >= 126:
            size = int.from_bytes(await reader.readexactly(2 if size == 126 else 8), "big")
        return b0 & 0x0F, await reader.readexactly(size)


async def next_message(reader: asyncio.StreamReader) -> dict[str, Any]:
    while True:
        opcode, data = await read_frame(reader)
        if opcode == OP_PING:
            continue  # the gateway's keepalive: a missed pong only closes after a while
        assert opcode == OP_TEXT, (opcode, data)
        msg: dict[str, Any] = json.loads(data)
        if msg["type"] not in ("heartbeat", "progress"):
            return msg


def subscribe_frame(sub: str, key: str) -> str:
    return json.dumps({"type": "subscribe", "sub": sub, "view": "profiles", "key": key})


async def test_an_owned_socket_speaks_rfc6455(gateway: ServedGateway) -> None:
    """The gateway's own framing, from a plain socket: a fragmented message with a ping between
    its frames, the closing handshake."""

    reader, writer = await raw_socket(gateway)
    assert (await next_message(reader))["type"] == "authenticated"
    writer.write(Frame(Opcode.TEXT, subscribe_frame("a", "raw1").encode()).serialize(mask=True))
    assert (await next_message(reader))["type"] == "snapshot"
    assert "OwnedSocket" in gateway.connection_kinds()
    text = subscribe_frame("b", "raw2").encode()
    writer.write(Frame(Opcode.TEXT, text[:10], fin=False).serialize(mask=True)
                 + Frame(Opcode.PING, b"are you there").serialize(mask=True)
                 + Frame(Opcode.CONT, text[10:20], fin=False).serialize(mask=True))  # fmt: skip
    assert await read_frame(reader) == (OP_PONG, b"are you there")
    writer.write(Frame(Opcode.CONT, text[20:]).serialize(mask=True))
    m = await next_message(reader)
    assert (m["type"], m["sub"]) == ("snapshot", "b"), m
    writer.write(Frame(Opcode.CLOSE, Close(4000, "bye").serialize()).serialize(mask=True))
    opcode, data = await read_frame(reader)
    assert (opcode, int.from_bytes(data[:2], "big")) == (OP_CLOSE, 4000)
    assert await read_frame(reader) == (-1, b"")
    writer.close()


@pytest.mark.parametrize(
    ("frame", "code"),
    [
        (Frame(Opcode.TEXT, b"{}").serialize(mask=False), 1002),
        (Frame(Opcode.TEXT, b"\xff").serialize(mask=True), 1007),
        # Refused from the header alone, before the payload is read.
        (Frame(Opcode.TEXT, b"x" * 70_000).serialize(mask=True)[:20], 1009),
    ],
    ids=["unmasked", "invalid-utf8", "too-big"],
)
async def test_an_owned_socket_closes_on_a_broken_frame(
    gateway: ServedGateway, frame: bytes, code: int
) -> None:
    reader, writer = await raw_socket(gateway)
    assert (await next_message(reader))["type"] == "authenticated"
    writer.write(frame)
    opcode, data = await read_frame(reader)
    assert (opcode, int.from_bytes(data[:2], "big")) == (OP_CLOSE, code)
    assert await read_frame(reader) == (-1, b"")
    writer.close()


async def test_compression_is_negotiated_only_when_configured(
    gateway: ServedGateway, store_url: str, writer: Writer
) -> None:
    """Browsers offer permessage-deflate on every socket; a compressed socket keeps a compressor
    and a decompressor for life, so the gateway accepts the offer only with LV_WS_COMPRESSION.
    A compressed socket is served through uvicorn's WebSocket protocol, and works the same."""

    async def negotiated(gw: ServedGateway, kind: str) -> int:
        async with aiohttp.ClientSession() as s:
            ws = await s.ws_connect(gw.ws_url, compress=15,
                                    params={"access_token": gw.token("alice")})  # fmt: skip
            sock = Socket(ws)
            assert (await sock.next())["type"] == "authenticated"
            await sock.send(type="subscribe", sub="z", view="profiles", key="zipped")
            assert (await sock.next())["type"] == "snapshot"
            assert kind in gw.connection_kinds()
            writer.write([("profiles", "zipped", "name", {"v": kind})])
            m = await sock.next()
            assert (m["type"], m["data"]["ops"][0]["value"]) == ("delta", {"v": kind}), m
            await sock.send(type="unsubscribe", sub="z")
            assert (await sock.next())["type"] == "unsubscribed"
            compress = ws.compress
            await ws.close()
            await wait_for(lambda: gw.gateway.metrics.subscriptions == 0, timeout=5)
            return compress

    assert await negotiated(gateway, "OwnedSocket") == 0
    compressing = ServedGateway(settings_for(store_url, LV_WS_COMPRESSION="true")).start()
    try:
        assert await negotiated(compressing, "WebSocketProtocol") > 0
    finally:
        compressing.stop()


async def test_a_store_that_cannot_be_reached_gets_errors_and_the_socket_serves_on(
    store: redis.Redis, store_url: str
) -> None:
    """A publish or a subscription that cannot reach the store is answered with
    ``store_unavailable`` (with its ``req`` or ``sub``); the socket stays open, and serves both
    once the store is back."""
    served = ServedGateway(settings_for(store_url)).start()
    loop = served.server.servers[0].get_loop()
    pool = served.gateway.client.connection_pool
    port = pool.connection_kwargs["port"]

    async def point_at(new_port: int) -> None:
        pool.connection_kwargs["port"] = new_port
        await pool.disconnect()
        pool.reset()  # its connections remember the old address

    def switch(new_port: int) -> Any:
        return asyncio.wrap_future(asyncio.run_coroutine_threadsafe(point_at(new_port), loop))

    events = [{"type": "profile_set", "payload": {"user": "alice", "name": "A"}}]
    try:
        async with aiohttp.ClientSession() as s:
            sock = await connect(s, served, served.token("alice"))
            assert (await sock.next())["type"] == "authenticated"
            await switch(free_port())  # nothing listens there
            await sock.send(type="publish", req="p1", events=events)
            m = await sock.next()
            assert (m["type"], m["code"], m["req"]) == ("error", "store_unavailable", "p1")
            await sock.send(type="subscribe", sub="s1", view="profiles", key="alice")
            m = await sock.next()
            assert (m["type"], m["code"], m["sub"]) == ("error", "store_unavailable", "s1")
            await switch(port)
            await sock.send(type="publish", req="p2", events=events)
            assert (await sock.next())["type"] == "published"
            await sock.send(type="subscribe", sub="s1", view="profiles", key="alice")
            assert (await sock.next())["type"] == "snapshot"
            await sock.ws.close()
    finally:
        served.stop()


async def test_a_wait_message_brings_the_covering_frontier_before_the_progress_interval(
    store_url: str, store: redis.Redis, writer: Writer
) -> None:
    """Read-your-writes over a WebSocket: after ``wait`` for an offset, the first frontier that
    covers it comes at once, after the deltas it covers; without one, the progress interval
    (here 4 s) holds it back. A malformed wait is the socket's error; the subscription lives."""
    served = ServedGateway(settings_for(store_url, LV_PROGRESS_INTERVAL_MS="4000")).start()
    try:
        async with aiohttp.ClientSession() as s:
            sock = await connect(s, served, served.token("alice"))
            assert (await sock.next())["type"] == "authenticated"
            await sock.send(type="subscribe", sub="a", view="profiles", key="ryw")
            assert (await sock.next())["type"] == "snapshot"
            writer.write([("profiles", "ryw", "profile", {"name": "one"})], {0: "100-0"})
            assert (await sock.next(skip=("heartbeat",)))["type"] == "delta"
            first = await sock.next(skip=("heartbeat",))  # the first frontier is due at once
            assert (first["type"], first["data"]["frontier"]["0"]) == ("progress", "100-0")

            await sock.send(type="wait", sub="a", offsets=[{"partition": 0, "id": "200-0"}])
            await sock.send(type="wait", sub="a", offsets=[{"partition": 9, "id": "1-0"}])
            writer.write([("profiles", "ryw", "profile", {"name": "two"})], {0: "150-0"})
            assert (await sock.next(skip=("heartbeat",)))["type"] == "delta"
            writer.write([("profiles", "other", "profile", {"name": "x"})], {0: "200-5"})
            started = asyncio.get_running_loop().time()
            answer = await sock.next(timeout=3, skip=("heartbeat",))
            assert (answer["type"], answer["sub"]) == ("progress", "a")
            assert answer["data"]["frontier"]["0"] == "200-5"
            assert asyncio.get_running_loop().time() - started < 1.5
            # Chirp's profiles run in Real-Time Mode: the waits were told to its source, which
            # ends its epoch once past them (liveviews.gateway.feed.wants).
            told = [{k.decode(): v.decode() for k, v in f.items()}
                    for _, f in store.xrange(WANTS_STREAM)]  # fmt: skip
            assert told and {**told[0], **(told[1] if len(told) > 1 else {})} == {
                "0": "200-0", "9": "1-0"}, told  # fmt: skip

            for bad in [{"type": "wait", "sub": "a", "offsets": []},
                        {"type": "wait", "sub": "a", "offsets": [{"partition": 0, "id": "x"}]},
                        {"type": "wait", "sub": "a", "offsets": [{"partition": -1, "id": "1-0"}]},
                        {"type": "wait", "sub": "a"}]:  # fmt: skip
                await sock.ws.send_str(json.dumps(bad))
                error = await sock.next(skip=("heartbeat",))
                assert (error["type"], error["code"]) == ("error", "invalid_message"), bad
                assert "sub" not in error and "publish answers" in error["message"]
            await sock.send(type="wait", sub="gone", offsets=[{"partition": 0, "id": "1-0"}])
            writer.write([("profiles", "ryw", "profile", {"name": "three"})], {0: "300-0"})
            delta = await sock.next(skip=("heartbeat",))
            assert (delta["type"], delta["sub"]) == ("delta", "a"), "the subscription lives on"
            await sock.ws.close()
    finally:
        served.stop()
