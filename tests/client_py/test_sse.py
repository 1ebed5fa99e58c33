"""The SSE transport: a subscription on a ``GET .../live`` stream of its own, by key, prefix and
window, resumed with no gap and no duplicate after a cut; tokens replaced on the next request;
``reflects`` by waits posted under the stream's own id, again after it reopens; and
``transport="auto"`` falling back to SSE when something in front of the gateway refuses
WebSockets, but not when the gateway is away."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import jwt
import orjson
import pytest
import redis

from liveviews.client import (
    ClientState,
    GatewayError,
    Offset,
    Subscription,
    SubscriptionState,
    sync,
)
from liveviews.client.errors import ProtocolError
from liveviews.client.frames import FRAME_KINDS, decode, decode_sse, decode_sse_group
from liveviews.client.sse import wait_bodies
from liveviews.client.sselines import SseComment, SseEvent, SseParser
from tests.client_py.noupgrade import NoWebSocketProxy
from tests.client_py.proxy import Proxy
from tests.client_py.support import FAST, Collected, client_of, task, titles
from tests.client_py.test_publish import task_set
from tests.client_py.test_resume import Writing, assert_no_gap_and_no_duplicate
from tests.client_py.test_tokens import write_for
from tests.support.gateway import ServedGateway, Writer, stored_rows, wait_for
from tests.support.gateway_settings import SHARDS, settings_for

GOLDEN = Path(__file__).resolve().parents[2] / "protocol" / "golden"
SSE_GOLDEN = {
    p.name: g for p in sorted(GOLDEN.glob("*.json")) if "sse" in (g := json.loads(p.read_text()))
}


@pytest.fixture(scope="module")
def fast_gateway(store_url: str) -> Iterator[ServedGateway]:
    """A gateway sending progress every 200 ms: over SSE the frontier comes at that rhythm."""
    settings = settings_for(
        store_url, LV_APP="tests.support.queryapp:app", LV_PROGRESS_INTERVAL_MS="200"
    )
    served = ServedGateway(settings).start()
    yield served
    served.stop()


def variants(text: str) -> list[list[bytes]]:
    """The stream as one chunk, byte by byte, and with CRLF and CR line ends byte by byte."""
    raw = text.encode()
    crlf, cr = text.replace("\n", "\r\n").encode(), text.replace("\n", "\r").encode()
    return [[raw], [raw[i : i + 1] for i in range(len(raw))], [bytes([b]) for b in crlf],
            [bytes([b]) for b in cr]]  # fmt: skip


@pytest.mark.parametrize("name", sorted(SSE_GOLDEN))
def test_each_golden_sse_event_is_the_frame_the_socket_carries(name: str) -> None:
    g = SSE_GOLDEN[name]
    for chunks in variants(g["sse"]):
        parser = SseParser()
        items = [item for chunk in chunks for item in parser.feed(chunk)]
        if g["kind"] == "heartbeat":
            assert items == [SseComment("heartbeat")]
            continue
        (event,) = items
        assert isinstance(event, SseEvent) and g["kind"] in FRAME_KINDS | {"group"}
        sub = g["ws"]["sub"]
        decoded = (decode_sse_group(event.id, event.data, sub) if event.event == "group"
                   else decode_sse(event.event, event.id, event.data, sub))  # fmt: skip
        assert decoded == decode(g["ws"]["text"])


def test_an_sse_event_the_protocol_does_not_describe_is_a_protocol_error() -> None:
    parser = SseParser()
    (event,) = parser.feed(b'event: delta\nid: x\ndata: {"view": "v"}\n\nevent: del')
    with pytest.raises(ProtocolError, match="key"):
        decode_sse(event.event, event.id, event.data)
    with pytest.raises(ProtocolError, match="not JSON"):
        decode_sse("snapshot", "x", "{")
    utf8 = 'ta\ndata: {"title": "caf\u00e9"}\n\n'.encode()
    assert [e for i in range(len(utf8)) for e in parser.feed(utf8[i : i + 1])] == [
        SseEvent("delta", None, '{"title": "caf\u00e9"}')
    ], "a character split between chunks, and an event split between them"


async def test_a_key_over_sse_keeps_the_gateways_rows(
    gateway: ServedGateway, store: redis.Redis, writer: Writer
) -> None:
    writer.write([("tasks", "b1/t1", "task", task("v0")), ("tasks", "b1/t1", "note", "n")])
    async with client_of(gateway, transport="sse") as client:
        assert client.transport == "sse" and client.state == ClientState.DISCONNECTED
        sub = client.subscribe("tasks", "b1/t1")  # the key's "/" goes as %2F
        got = Collected(sub)
        await sub.ready()
        assert client.state == ClientState.CONNECTED and sub.state == SubscriptionState.LIVE
        for i in range(1, 21):
            writer.write([("tasks", "b1/t1", "task", task(f"v{i}"))])
        writer.write([("tasks", "b1/t1", "note", None)])
        await got.until(lambda c: len(c) == 22)
        assert titles(got.deltas()) == [f"v{i}" for i in range(1, 21)]
        assert dict(sub.rows) == stored_rows(store, "tasks", "b1/t1", SHARDS)
        assert sub.last_event_id == got.changes[-1].event_id
        assert sub.to_pandas().loc["task", "title"] == "v20"
        sub.unsubscribe()
        assert client.state == ClientState.DISCONNECTED, "its stream is closed"
        await got.stop()
    assert sub.state == SubscriptionState.CLOSED


async def test_a_prefix_and_windows_over_sse(
    gateway: ServedGateway, store: redis.Redis, writer: Writer
) -> None:
    def points(n: int) -> dict[str, float]:
        return {"points": n, "score": float(n)}

    writer.write(
        [("tasks", "b1/t1", "task", task("one")), ("tasks", "b2/t9", "task", task("other"))]
        + [("scores", "g1", p, points(n)) for p, n in [("ann", 5), ("bob", 9), ("cy", 7)]]
    )
    async with client_of(gateway, transport="sse") as client:
        board = client.subscribe("tasks", prefix="b1/")
        every = client.subscribe("tasks", prefix="")
        top = client.subscribe("scores", "g1", limit=2)
        page = client.subscribe("scores", "g1", limit=2, after=(7.0, "cy"))
        got = [Collected(s) for s in (board, every, top)]
        for sub in (board, every, top, page):
            await sub.ready()
        assert list(board.keys) == ["b1/t1"] and set(every.keys) == {"b1/t1", "b2/t9"}
        assert [r.row for r in top.ranked] == ["bob", "cy"] and [r.row for r in page.ranked] == [
            "ann"
        ]
        writer.write([("tasks", "b1/t2", "task", task("two"))])
        writer.write([("tasks", "b2/t8", "task", task("not b1"))])
        writer.write([("tasks", "b1/t1", "task", None)])
        writer.write([("scores", "g1", "dee", points(8))])
        await got[0].until(lambda c: len(c) == 3)
        await got[1].until(lambda c: len(c) == 4)
        await got[2].until(lambda c: len(c) == 2)
        stored = {k: stored_rows(store, "tasks", k, SHARDS) for k in ("b1/t2", "b2/t8", "b2/t9")}
        assert {k: dict(r) for k, r in every.keys.items()} == stored
        assert {k: dict(r) for k, r in board.keys.items()} == {"b1/t2": stored["b1/t2"]}
        assert [(r.row, r.score) for r in top.ranked] == [("bob", 9.0), ("dee", 8.0)]
        assert [r.row for r in page.ranked] == ["ann"], "dee came in before the page"
        assert list(every.to_pandas().index.get_level_values("key")) == list(every.keys)
        for each in got:
            await each.stop()


async def test_the_gateways_refusals_over_sse_carry_its_code_and_status(
    gateway: ServedGateway,
) -> None:
    async with client_of(gateway, transport="sse") as client:
        cases = [
            (client.subscribe("nope", "k"), "unknown_view", 404),
            (client.subscribe("scores", prefix="g"), "not_listable", 400),
            (client.subscribe("tasks", "b1/t1", limit=3), "not_ranked", 400),
            (client.subscribe("drafts", "bob/d1"), "forbidden", 403),
        ]
        for sub, code, status in cases:
            with pytest.raises(GatewayError) as refused:
                await sub.ready()
            assert (refused.value.code, refused.value.status) == (code, status)
            assert sub.state == SubscriptionState.ERROR
    async with client_of(gateway, token=gateway.token("alice", ttl=-10), transport="sse") as c:
        with pytest.raises(GatewayError) as expired:  # a fixed token cannot be replaced
            await c.subscribe("tasks", "b1/t1").ready()
        assert (expired.value.code, expired.value.status) == ("token_expired", 401)


async def test_cut_streams_are_resumed_with_no_gap_and_no_duplicate(
    proxy: Proxy, gateway: ServedGateway, writer: Writer
) -> None:
    async with client_of(gateway, url=proxy.url, transport="sse") as client:
        subs = [client.subscribe("tasks", "b1/t1"), client.subscribe("tasks", prefix="b1/")]
        got = [Collected(sub) for sub in subs]
        for sub in subs:
            await sub.ready()
        writing = Writing(writer, "b1/t1")
        for cuts in range(3):
            await wait_for(
                lambda n=cuts: proxy.connections == 2 * (n + 1) and client.state == "connected"
            )
            seen = len(got[0].changes)
            await got[0].until(lambda c, seen=seen: len(c) > seen + 5)
            proxy.cut()
        await wait_for(lambda: proxy.connections == 8 and client.state == "connected")
        await asyncio.sleep(0.1)
        last = writing.stop()
        for each in got:
            await each.until(lambda c: titles(c[-1:]) == [f"t{last}"])
            assert_no_gap_and_no_duplicate(each, last)
            await each.stop()
        assert proxy.connections == 8, "a stream per subscription, opened again after each cut"


async def test_a_token_is_replaced_before_it_expires_and_the_stream_resumes_with_it(
    proxy: Proxy, gateway: ServedGateway, writer: Writer
) -> None:
    """A stream cannot change its token: the provider is asked before the token expires, the
    gateway ends the stream at its expiry, and it opens again at once with the new token."""
    asked: list[tuple[float, float]] = []  # when the provider was asked, and its token's expiry

    async def provider() -> str:
        token = gateway.token("alice", ttl=3)  # 2 to 3 s: expiry is a whole second
        asked.append((time.time(), jwt.decode(token, options={"verify_signature": False})["exp"]))
        return token

    async with client_of(gateway, url=proxy.url, token_provider=provider, transport="sse") as c:
        sub = c.subscribe("tasks", "b1/t1")
        got = Collected(sub)
        await sub.ready()
        n = await write_for(4.0, got, writer)
        assert len(asked) >= 2 and asked[1][0] < asked[0][1], "asked before the first expired"
        assert proxy.connections >= 2, "the gateway ended the stream at expiry"
        assert len(got.snapshots()) == 1, "resumed, not reset"
        assert titles(got.deltas()) == [f"t{i}" for i in range(1, n + 1)]
        await got.stop()


async def test_a_token_refused_as_expired_is_replaced_on_the_next_request(
    gateway: ServedGateway,
) -> None:
    tokens = [gateway.token("alice", ttl=-10), gateway.token("alice")]
    calls = 0

    def provider() -> str:
        nonlocal calls
        calls += 1
        return tokens[min(calls, 2) - 1]

    async with client_of(gateway, token_provider=provider, transport="sse") as client:
        subs = [client.subscribe("tasks", "b1/t1"), client.subscribe("tasks", prefix="b1/")]
        for sub in subs:
            await sub.ready()
        assert calls == 2, "one new token for both streams refused with the old one"


def test_a_script_over_sse_reads_its_own_writes(
    fast_gateway: ServedGateway, writer: Writer
) -> None:
    """``reflects`` over SSE: the frontier that covers the offset comes, asked for."""
    event: dict[str, Any] = {"type": "task_set",
                             "payload": {"board": "b1", "task": "t1", "title": "mine"}}  # fmt: skip
    token = fast_gateway.token("b1")
    with sync.connect(fast_gateway.url, token=token, transport="sse", **FAST) as client:
        assert client.transport == "sse"
        sub = client.subscribe("tasks", "b1/t1").ready()
        (offset,) = offsets = client.publish([event], idempotency_key="sse-1")
        assert client.publish([event], idempotency_key="sse-1") == offsets
        with pytest.raises(TimeoutError):
            sub.reflects(offsets, timeout=0.5)  # the view has not got there yet
        # What the pipeline does with the event: the view's delta, then the frontier past it.
        writer.write([("tasks", "b1/t1", "task", {"title": "mine"})], {offset.partition: offset.id})
        sub.reflects(offsets, timeout=5)
        assert sub.rows == {"task": {"title": "mine"}}, "the delta came before the frontier"
        assert sub.to_pandas().loc["task", "title"] == "mine"
        assert set(client.subscribe("tasks", prefix="b1/").ready().keys) == {"b1/t1"}


STREAM_ID = re.compile(r"[A-Za-z0-9_-]{22}")
WAIT = re.compile(rb"POST /v1/streams/([^/ ]+)/wait HTTP/1\.1\r\n.*?\r\n\r\n(\{.*?\]\})", re.S)


def streams_opened(proxy: Proxy) -> list[tuple[str, str]]:
    """Each stream request the clients sent: its path and query without ``stream``, and its
    ``stream`` id."""
    opened = []
    for target in re.findall(rb"GET (\S+) HTTP/1\.1\r\n", proxy.sent):
        url = urlsplit(target.decode())
        params = parse_qsl(url.query)
        (stream,) = [v for k, v in params if k == "stream"]
        rest = "&".join(f"{k}={v}" for k, v in params if k != "stream")
        opened.append((url.path + ("?" + rest if rest else ""), stream))
    return opened


def waits_posted(proxy: Proxy) -> list[tuple[str, Any]]:
    """Each wait the clients posted: its stream id, and its body."""
    return [(s.decode(), orjson.loads(body)) for s, body in WAIT.findall(proxy.sent)]


async def progress_just_sent(sub: Subscription, writer: Writer, offset: Offset) -> None:
    """Have the gateway send ``sub`` a frontier just short of ``offset`` and wait for it: the
    next one, which covers ``offset``, is then not due for one and a half progress intervals
    (6 s here) unless a wait asks for it."""
    below = f"{int(offset.id.split('-')[0]) - 1}-0"
    writer.write([("tasks", "b1/t1", "task", {"title": "before"})], {offset.partition: below})
    await wait_for(lambda: sub.frontier.get(str(offset.partition)) == below)


def no_wait_failed(caplog: pytest.LogCaptureFixture) -> bool:
    return not [r for r in caplog.records if "could not post a wait" in r.getMessage()]


def test_a_wait_names_the_latest_offset_of_each_partition_64_at_most() -> None:
    offsets = [Offset(0, "9-9"), Offset(0, "10-1"), Offset(1, "1-0"), Offset(0, "10-0")]
    offsets += [Offset(p, "1-0") for p in range(2, 70)]
    bodies = [orjson.loads(body)["offsets"] for body in wait_bodies(offsets)]
    assert [len(b) for b in bodies] == [64, 6]
    assert bodies[0][:2] == [{"partition": 0, "id": "10-1"}, {"partition": 1, "id": "1-0"}]


async def test_each_stream_sends_an_id_of_its_own_on_every_request(
    proxy: Proxy, gateway: ServedGateway
) -> None:
    async with client_of(gateway, url=proxy.url, transport="sse") as client:
        subs = [client.subscribe("tasks", "b1/t1"), client.subscribe("scores", "g1", limit=2)]
        for sub in subs:
            await sub.ready()
        proxy.cut()
        await wait_for(lambda: proxy.connections == 4 and client.state == ClientState.CONNECTED)
    ids: dict[str, list[str]] = {}
    for path, stream in streams_opened(proxy):
        ids.setdefault(path, []).append(stream)
    key = ids.pop("/v1/views/tasks/b1%2Ft1/live")
    window = ids.pop("/v1/views/scores/g1/live?limit=2")
    assert not ids and len(key) == len(window) == 2, "each opened twice"
    assert key[0] == key[1] and window[0] == window[1], "the same id after the cut"
    assert key[0] != window[0] and STREAM_ID.fullmatch(key[0]) and STREAM_ID.fullmatch(window[0])


async def test_reflects_over_sse_posts_a_wait_for_its_stream(
    proxy: Proxy, gateway: ServedGateway, writer: Writer, caplog: pytest.LogCaptureFixture
) -> None:
    """The gateway of these tests sends progress every 4 s: a frontier within 1.5 s of the one
    before is the answer to the wait."""
    caplog.set_level(logging.DEBUG, "liveviews.client")
    async with client_of(gateway, url=proxy.url, user="b1", transport="sse") as client:
        sub = client.subscribe("tasks", "b1/t1")
        await sub.ready()
        (offset,) = offsets = await client.publish([task_set("mine")])
        waiting = asyncio.create_task(sub.reflects(offsets))
        await wait_for(lambda: len(waits_posted(proxy)) == 1)
        await progress_just_sent(sub, writer, offset)
        assert not waiting.done(), "no frontier covers the offset yet"
        writer.write([("tasks", "b1/t1", "task", {"title": "mine"})], {offset.partition: offset.id})
        await asyncio.wait_for(waiting, 1.5)
        assert dict(sub.rows) == {"task": {"title": "mine"}}, "the delta came before"
    ((_, stream),) = streams_opened(proxy)
    assert waits_posted(proxy) == [(stream, {"offsets": [offset.to_dict()]})]
    assert proxy.answered.count(b"HTTP/1.1 204") == 1 and no_wait_failed(caplog)


async def test_pending_waits_are_posted_again_when_the_stream_opens_again(
    proxy: Proxy, gateway: ServedGateway, writer: Writer, caplog: pytest.LogCaptureFixture
) -> None:
    """The gateway forgets a stream's waits with the stream: after a cut, only the wait posted
    again brings the frontier before the progress rhythm (4 s here)."""
    caplog.set_level(logging.DEBUG, "liveviews.client")
    async with client_of(gateway, url=proxy.url, user="b1", transport="sse") as client:
        sub = client.subscribe("tasks", "b1/t1")
        await sub.ready()
        (offset,) = offsets = await client.publish([task_set("after the cut")])
        waiting = asyncio.create_task(sub.reflects(offsets))
        await wait_for(lambda: proxy.answered.count(b"HTTP/1.1 204") == 1)
        proxy.cut()
        await wait_for(lambda: len(streams_opened(proxy)) == 2)
        await wait_for(lambda: proxy.answered.count(b"HTTP/1.1 204") == 2)
        assert sub.state == SubscriptionState.LIVE
        await progress_just_sent(sub, writer, offset)
        assert not waiting.done()
        writer.write(
            [("tasks", "b1/t1", "task", {"title": "after the cut"})], {offset.partition: offset.id}
        )
        await asyncio.wait_for(waiting, 1.5)
    first, again = streams_opened(proxy)
    assert first == again, "resumed under its id"
    stream = first[1]
    assert waits_posted(proxy) == [(stream, {"offsets": [offset.to_dict()]})] * 2
    assert no_wait_failed(caplog)


async def test_auto_falls_back_to_sse_when_a_proxy_refuses_the_upgrade(
    gateway: ServedGateway, writer: Writer
) -> None:
    front = await NoWebSocketProxy(gateway.settings.port).start()
    try:
        async with client_of(gateway, url=front.url, user="b1") as client:
            assert client.transport == "websocket"
            sub = client.subscribe("tasks", "b1/t1")
            got = Collected(sub)
            await sub.ready()
            # Two refusals in a row with HTTP answering: not a gateway back from a restart.
            assert (client.transport, front.refused) == ("sse", 2)
            writer.write([("tasks", "b1/t1", "task", task("over sse"))])
            await got.until(lambda c: titles(c) == ["over sse"])
            event = {"type": "task_set", "payload": {"board": "b1", "task": "t2", "title": "x"}}
            assert len(await client.publish([event])) == 1, "publish over HTTP"
            await client.subscribe("tasks", prefix="b1/").ready()
            assert client.state == ClientState.CONNECTED
            assert front.refused == 2, "it fell back for good"
            await got.stop()
        refused = front.refused
        async with client_of(gateway, url=front.url, transport="websocket") as client:
            sub = client.subscribe("tasks", "b1/t1")
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(sub.ready(), 1.0)
            assert (client.transport, sub.state) == ("websocket", SubscriptionState.CONNECTING)
            assert front.refused >= refused + 2, "it keeps trying the WebSocket"
    finally:
        await front.close()


async def test_auto_tries_the_websocket_again_before_it_falls_back(
    gateway: ServedGateway,
) -> None:
    """One handshake refused while HTTP answers is what a gateway that restarts between the two
    can show: the client stays on the WebSocket if the next handshake opens."""
    front = await NoWebSocketProxy(gateway.settings.port, refusals=1).start()
    try:
        async with client_of(gateway, url=front.url, user="b1") as client:
            sub = client.subscribe("tasks", "b1/t1")
            await sub.ready()
            assert (client.transport, client.state) == ("websocket", ClientState.CONNECTED)
            assert front.refused == 1
    finally:
        await front.close()


async def test_auto_stays_on_the_websocket_while_the_gateway_is_out_of_reach(
    proxy: Proxy, gateway: ServedGateway
) -> None:
    proxy.down = True  # every connection dropped: the handshake, and HTTP as much
    async with client_of(gateway, url=proxy.url) as client:
        sub = client.subscribe("tasks", "b1/t1")
        await asyncio.sleep(0.5)
        assert client.transport == "websocket" and client.state != ClientState.CONNECTED
        proxy.down = False
        await sub.ready()
        assert (client.transport, client.state) == ("websocket", ClientState.CONNECTED)
