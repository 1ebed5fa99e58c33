"""The change feed's wait and transaction in one write (``liveviews.gateway.feed.pipelined``),
against a real store: the transaction runs when the wait ends and sees what ended it, errors
leave no connection with replies unread, and both reply protocols take the same shape."""

from __future__ import annotations

import asyncio

import pytest
import redis
import redis.asyncio as aioredis

from liveviews.gateway.feed.pipelined import hash_of, streams_of, transact
from liveviews.gateway.feed.store import connect
from liveviews.store.embedded import EmbeddedStore
from tests.support.gateway import free_port


@pytest.fixture
def store_url(tmp_path):
    store = EmbeddedStore(tmp_path, free_port())
    url = store.start()
    yield url
    store.stop()


def read(stream: str, position: str) -> tuple[object, ...]:
    return ("XREAD", "COUNT", 10, "STREAMS", stream, position)


@pytest.mark.parametrize("protocol", [2, 3])
async def test_the_transaction_runs_when_the_wait_ends_and_sees_its_entry(store_url, protocol):
    client = aioredis.Redis.from_url(store_url, protocol=protocol, socket_timeout=5)
    writer = aioredis.Redis.from_url(store_url)
    try:
        await writer.hset("h", mapping={"a": "1"})
        wait = ("XREAD", "COUNT", 1, "BLOCK", 3000, "STREAMS", "s", "0-0")
        waiting = asyncio.create_task(
            transact(client, [("HGETALL", "h"), read("s", "0-0")], wait=wait)
        )
        await asyncio.sleep(0.2)
        assert not waiting.done()  # held by the wait, not answered from an empty stream
        entry = await writer.xadd("s", {"f": "v"})
        active, streams = await asyncio.wait_for(waiting, 2)
        assert hash_of(active) == {b"a": b"1"}
        assert streams_of(streams) == [[b"s", [(entry, {b"f": b"v"})]]]
        # The connection went back clean: a plain transaction on it answers its own replies.
        (nothing,) = await transact(client, [read("s", entry.decode())])
        assert streams_of(nothing) == []
    finally:
        await client.aclose()
        await writer.aclose()


async def test_a_timed_out_wait_still_runs_the_transaction(store_url):
    client = connect(store_url, blocking_ms=100)
    try:
        wait = ("XREAD", "COUNT", 1, "BLOCK", 100, "STREAMS", "s", "0-0")
        (streams,) = await transact(client, [read("s", "0-0")], wait=wait)
        assert streams_of(streams) == []
    finally:
        await client.aclose()


async def test_an_error_in_the_transaction_is_raised_and_the_connection_dropped(store_url):
    client = aioredis.Redis.from_url(store_url, max_connections=1)
    try:
        await client.set("plain", "x")
        with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
            await transact(client, [("HGETALL", "plain"), read("s", "0-0")])
        with pytest.raises(redis.ResponseError, match="wrong number of arguments"):
            await transact(client, [("HGETALL",)], wait=("XREAD", "BLOCK", 10, "STREAMS", "s", "0"))
        (answer,) = await transact(client, [("GET", "plain")])  # the one connection, fresh
        assert answer == b"x"
    finally:
        await client.aclose()


async def test_a_cancelled_wait_closes_its_connection(store_url):
    client = aioredis.Redis.from_url(store_url, max_connections=1)
    try:
        wait = ("XREAD", "COUNT", 1, "BLOCK", 5000, "STREAMS", "s", "$")
        waiting = asyncio.create_task(transact(client, [read("s", "0-0")], wait=wait))
        await asyncio.sleep(0.2)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        # Its replies would still come on the old connection; the next call must not read them.
        (answer,) = await asyncio.wait_for(transact(client, [("PING",)]), 2)
        assert answer in (b"PONG", "PONG")
    finally:
        await client.aclose()


def test_replies_of_either_protocol_take_redis_py_shapes() -> None:
    assert hash_of([b"a", b"1", b"b", b"2"]) == hash_of({b"a": b"1", b"b": b"2"})
    resp2 = [[b"s", [[b"1-0", [b"f", b"v"]]]]]
    resp3 = {b"s": [[b"1-0", [b"f", b"v"]]]}
    assert streams_of(resp2) == streams_of(resp3) == [[b"s", [(b"1-0", {b"f": b"v"})]]]
    assert streams_of(None) == streams_of({}) == []
