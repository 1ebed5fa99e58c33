"""``GET /v1/log/live``: events as they are appended, after the recent ones; reading needs a token."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import aiohttp
import orjson
import pytest
import redis

from liveviews.gateway.errors import SLOW_CONSUMER
from liveviews.log.events import Event, log_stream
from tests.support.gateway import ServedGateway, open_sse, wait_for
from tests.support.gateway_settings import settings_for

LOG = "/v1/log/live"


def tweet(user: str, n: int) -> dict[str, Any]:
    return {"type": "tweet_posted", "payload": {"user": user, "tweet": f"{user}:{n}", "text": f"t{n}"},
            "time": "2026-01-31T12:00:00Z"}  # fmt: skip


async def test_appended_events_stream_in_order_and_new_readers_get_the_recent_ones(
    gateway: ServedGateway, store: redis.Redis
) -> None:
    async with aiohttp.ClientSession(headers=gateway.headers("alice")) as s:
        sse = await open_sse(s, gateway.url + LOG, params={"recent": "0"})
        resp = await s.post(gateway.url + "/v1/events",
                            json=[tweet("alice", i) for i in range(3)])  # fmt: skip
        assert resp.status == 202
        offsets = (await resp.json())["offsets"]
        seen = [await sse.next(skip=("heartbeat",)) for _ in range(3)]
        assert [f.event for f in seen] == ["log"] * 3 and all(f.id is None for f in seen)
        assert [f.data["id"] for f in seen] == [o["id"] for o in offsets]
        first = seen[0].data
        assert first == {
            "partition": offsets[0]["partition"], "id": offsets[0]["id"],
            "type": "tweet_posted", "key": "alice", "time": "2026-01-31T12:00:00.000Z",
            "payload": {"user": "alice", "tweet": "alice:0", "text": "t0"},
        }  # fmt: skip
        await sse.close()

        again = await open_sse(s, gateway.url + LOG, params={"recent": "2"})
        recent = [await again.next() for _ in range(2)]
        assert [f.data["payload"]["tweet"] for f in recent] == ["alice:1", "alice:2"]
        await again.close()


async def test_the_log_needs_a_token_and_a_sane_recent_count(gateway: ServedGateway) -> None:
    async with aiohttp.ClientSession() as s:
        anonymous = await s.get(gateway.url + LOG)
        assert (anonymous.status, (await anonymous.json())["code"]) == (401, "token_missing")
        writer_only = await s.get(gateway.url + LOG,
                                  headers=gateway.headers("alice", scope="publish"))  # fmt: skip
        assert (writer_only.status, (await writer_only.json())["code"]) == (
            403, "insufficient_scope",
        )  # fmt: skip
        # "²" and "٣" are digits to str.isdigit(), and not to int() or to a person.
        for bad in ("-1", "101", "x", "²", "٣", "1²"):
            resp = await s.get(gateway.url + LOG, params={"recent": bad},
                               headers=gateway.headers("alice"))  # fmt: skip
            assert (resp.status, (await resp.json())["code"]) == (400, "invalid_parameter")


async def test_the_log_feed_is_off_in_production(tight_gateway: ServedGateway) -> None:
    async with aiohttp.ClientSession(headers=tight_gateway.headers("alice")) as s:
        resp = await s.get(tight_gateway.url + LOG)
        assert (resp.status, (await resp.json())["code"]) == (404, "not_found")


async def until_closed(gw: ServedGateway, path: str, ttl: float) -> bytes:
    """What the gateway sends for ``GET path`` on a connection of its own, up to closing it."""
    host, port = gw.url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    auth = gw.headers(ttl=ttl)["Authorization"]
    writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\nAuthorization: {auth}\r\n\r\n".encode())
    try:
        async with asyncio.timeout(15):
            return await reader.read()  # to the end of the connection
    finally:
        writer.close()


def end_of(raw: bytes) -> dict[str, Any]:
    """The data of the ``end`` frame in a raw response."""
    after = raw.split(b"event: end\ndata: ", 1)[1]
    data: dict[str, Any] = orjson.loads(after.split(b"\n", 1)[0])
    return data


async def test_the_log_feed_ends_at_token_expiry_as_a_subscription_does(
    gateway: ServedGateway,
) -> None:
    """One sender delivers both: the log feed's stream has a subscription's heartbeats while
    idle, and at token expiry the same ``end`` frame, the last chunk, and its connection
    closed (the log feed has no id to resume from)."""
    view, logs = await asyncio.gather(
        until_closed(gateway, "/v1/views/profiles/expiring/live", ttl=3),
        until_closed(gateway, LOG + "?recent=0", ttl=3),
    )
    for raw in (view, logs):
        assert raw.startswith(b"HTTP/1.1 200"), raw[:200]
        assert raw.endswith(b"\r\n0\r\n\r\n"), raw[-200:]
    assert b": heartbeat\n\n" in logs.split(b"event: end", 1)[0]
    assert end_of(view)["code"] == "token_expired"
    assert end_of(logs) == {**end_of(view), "last_event_id": None}


BIG = "x" * 40_000
ENTRIES = 400
"""Log entries of ``BIG`` payloads a reader does not read: ~16 MB, more than the socket buffers
of both ends hold, so the gateway has frames unsent while it writes more."""


@pytest.fixture(scope="module")
def small_buffer(store_url: str) -> Iterator[ServedGateway]:
    served = ServedGateway(settings_for(store_url, LV_SUBSCRIBER_BUFFER="8")).start()
    yield served
    served.stop()


def append_big(store: redis.Redis, ids: list[str], stop: threading.Event) -> None:
    for i in range(ENTRIES):
        if stop.is_set():
            return
        event = Event("tweet_posted", "slow", {"i": i, "pad": BIG}, int(time.time() * 1000))
        ids.append(store.xadd(log_stream(0), event.encode()).decode())
        time.sleep(0.002)  # a few entries per read of the feed: each is written as it comes


async def test_a_log_reader_that_does_not_keep_up_ends_as_a_slow_subscription(
    small_buffer: ServedGateway, store: redis.Redis
) -> None:
    """The subscriptions' slow-consumer rule: past ``LV_SUBSCRIBER_BUFFER`` frames the client has
    not taken, the stream ends with their ``slow_consumer`` frame, after every entry before it,
    and the reader is let go of at once, not when the client reads again."""
    gw = small_buffer
    feed = gw.gateway.log_feed
    assert feed is not None
    ids: list[str] = []
    stop = threading.Event()
    async with aiohttp.ClientSession(headers=gw.headers()) as s:
        sse = await open_sse(s, gw.url + LOG, params={"recent": "0"})
        await wait_for(lambda: len(feed.readers) == 1)
        appending = asyncio.create_task(asyncio.to_thread(append_big, store, ids, stop))
        try:
            await wait_for(lambda: not feed.readers, timeout=60)
            await wait_for(lambda: gw.gateway.metrics.sse_connections == 0)
        finally:
            stop.set()
            await appending
        seen = []
        while (ev := await sse.next(timeout=30, skip=("heartbeat",))).event == "log":
            seen.append(ev.data["id"])
        assert ev.data == {"code": "slow_consumer", "message": SLOW_CONSUMER, "last_event_id": None}
        assert 0 < len(seen) < ENTRIES and seen == ids[: len(seen)]
        await sse.close()
