"""The WebSocket endpoint: multiplexed subscriptions, publishing, errors and token refresh."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp
import redis
from lvclient import ServedGateway, Writer, run, stored_rows
from tests_server_settings import settings_for

from streaming.events import log_stream

GOLDEN = Path(__file__).resolve().parents[2] / "protocol" / "golden"


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


def test_one_socket_multiplexes_subscriptions_and_publishes(
    gateway: ServedGateway, store: redis.Redis, writer: Writer
) -> None:
    async def go() -> None:
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

    run(go())


def test_bad_messages_get_errors_and_the_socket_stays_open(
    gateway: ServedGateway, store: redis.Redis
) -> None:
    async def go() -> None:
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

    run(go())


def test_golden_client_messages_are_understood(
    gateway: ServedGateway, store: redis.Redis
) -> None:
    async def go() -> None:
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

    run(go())


def test_tokens_are_checked_at_connect_and_can_be_refreshed(
    gateway: ServedGateway, store: redis.Redis, writer: Writer
) -> None:
    async def go() -> None:
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

            sock = await connect(s, gateway, gateway.token("alice", ttl=1.5))
            await sock.next()
            await sock.send(type="subscribe", sub="a", view="profiles", key="alice")
            await sock.next()
            await sock.send(type="auth", token=gateway.token("bob"))
            assert (await sock.next())["code"] == "subject_changed"
            await sock.send(type="auth", token=gateway.token("alice", ttl=60))
            assert (await sock.next())["type"] == "authenticated"
            await asyncio.sleep(2)  # past the first token's expiry
            writer.write([("profiles", "alice", "profile", {"name": "still here"})])
            delta = await sock.next()
            assert delta["type"] == "delta" and delta["sub"] == "a"
            await sock.ws.close()

            short = await connect(s, gateway, gateway.token("alice", ttl=1))
            await short.next()
            assert (await short.next(timeout=5))["code"] == "token_expired"
            assert (await short.next())["code"] == 4401
            assert stored_rows(store, "profiles", "alice", 8)["profile"]["name"] == "still here"

    run(go())


def test_an_open_socket_waits_outside_starlettes_stack(gateway: ServedGateway) -> None:
    """A socket is accepted through Starlette's middleware and routing, then its life is held
    by the gateway's own coroutine, not under Starlette's stack (its frames, per socket)."""

    async def go() -> None:
        async with aiohttp.ClientSession() as s:
            socks = [await connect(s, gateway, gateway.token("alice")) for _ in range(5)]
            for i, sock in enumerate(socks):
                assert (await sock.next())["type"] == "authenticated"
                await sock.send(type="subscribe", sub="a", view="profiles", key=f"idle{i}")
                assert (await sock.next())["type"] == "snapshot"
            runs = [t for t in gateway.awaited_files()
                    if any(f.endswith("server/app.py") for f in t)
                    and any(f.endswith("server/ws.py") for f in t)]  # fmt: skip
            assert len(runs) >= 5
            stack = ("starlette/applications.py", "starlette/routing.py",
                     "starlette/_exception_handler.py", "starlette/middleware/")  # fmt: skip
            assert not [f for t in runs for f in t if any(p in f for p in stack)], runs[0]
            for sock in socks:
                await sock.ws.close()

    run(go())


def test_compression_is_negotiated_only_when_configured(
    gateway: ServedGateway, store_url: str
) -> None:
    """Browsers offer permessage-deflate on every socket; a compressed socket keeps a compressor
    and a decompressor for life, so the gateway accepts the offer only with LV_WS_COMPRESSION."""

    async def negotiated(gw: ServedGateway) -> int:
        async with aiohttp.ClientSession() as s:
            ws = await s.ws_connect(gw.ws_url, compress=15)
            compress = ws.compress
            await ws.close()
            return compress

    assert run(negotiated(gateway)) == 0
    compressing = ServedGateway(settings_for(store_url, LV_WS_COMPRESSION="true")).start()
    try:
        assert run(negotiated(compressing)) > 0
    finally:
        compressing.stop()
