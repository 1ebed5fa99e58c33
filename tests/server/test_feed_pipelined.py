"""The change feed's wait and transaction in one write, on a connection it holds
(``liveviews.gateway.feed.pipelined``), against a real store: the transaction runs when the wait
ends and sees what ended it, errors and lost connections leave no reply unread on a connection
that is used again, and both reply protocols take the same shape."""

from __future__ import annotations

import asyncio

import pytest
import redis
import redis.asyncio as aioredis

from liveviews.gateway.feed.pipelined import FeedConnection, hash_of, pack, streams_of
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
    feed = FeedConnection(client)
    try:
        await writer.hset("h", mapping={"a": "1"})
        wait = ("XREAD", "COUNT", 1, "BLOCK", 3000, "STREAMS", "s", "0-0")
        waiting = asyncio.create_task(
            feed.transact([("HGETALL", "h"), read("s", "0-0")], wait=wait)
        )
        await asyncio.sleep(0.2)
        assert not waiting.done()  # held by the wait, not answered from an empty stream
        entry = await writer.xadd("s", {"f": "v"})
        active, streams = await asyncio.wait_for(waiting, 2)
        assert hash_of(active) == {b"a": b"1"}
        assert streams_of(streams) == [[b"s", [(entry, {b"f": b"v"})]]]
        held = feed._conn
        # The same connection answers the next transaction with its own replies only.
        (nothing,) = await feed.transact([read("s", entry.decode())])
        assert streams_of(nothing) == []
        assert feed._conn is held
    finally:
        await feed.close()
        await client.aclose()
        await writer.aclose()


async def test_a_timed_out_wait_still_runs_the_transaction(store_url):
    client = connect(store_url, blocking_ms=100)
    feed = FeedConnection(client)
    try:
        wait = ("XREAD", "COUNT", 1, "BLOCK", 100, "STREAMS", "s", "0-0")
        (streams,) = await feed.transact([read("s", "0-0")], wait=wait)
        assert streams_of(streams) == []
    finally:
        await feed.close()
        await client.aclose()


async def test_errors_are_raised_after_every_reply_is_read(store_url):
    client = aioredis.Redis.from_url(store_url, max_connections=1)
    feed = FeedConnection(client)
    try:
        await client.set("plain", "x")
        with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
            await feed.transact([("HGETALL", "plain"), read("s", "0-0")])
        with pytest.raises(redis.ResponseError, match="wrong number of arguments"):
            await feed.transact([("HGETALL",)], wait=("XREAD", "BLOCK", 10, "STREAMS", "s", "0"))
        (answer,) = await feed.transact([("GET", "plain")])  # in step: its own reply
        assert answer == b"x"
    finally:
        await feed.close()
        await client.aclose()


async def test_a_cancelled_wait_closes_its_connection(store_url):
    client = aioredis.Redis.from_url(store_url, max_connections=1)
    feed = FeedConnection(client)
    try:
        wait = ("XREAD", "COUNT", 1, "BLOCK", 5000, "STREAMS", "s", "$")
        waiting = asyncio.create_task(feed.transact([read("s", "0-0")], wait=wait))
        await asyncio.sleep(0.2)
        cancelled = feed._conn
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert not cancelled.is_connected  # its replies would still come on it
        (answer,) = await asyncio.wait_for(feed.transact([("PING",)]), 2)
        assert answer in (b"PONG", "PONG")
    finally:
        await feed.close()
        await client.aclose()


async def test_an_answer_later_than_the_timeout_closes_the_connection(store_url):
    client = aioredis.Redis.from_url(store_url, socket_timeout=0.2)
    feed = FeedConnection(client)
    try:
        wait = ("XREAD", "COUNT", 1, "BLOCK", 2000, "STREAMS", "s", "$")
        with pytest.raises(redis.TimeoutError):
            await feed.transact([read("s", "0-0")], wait=wait)
        assert feed._conn is None
        (answer,) = await feed.transact([("PING",)])
        assert answer == b"PONG"
    finally:
        await feed.close()
        await client.aclose()


async def test_a_connection_the_store_closes_is_replaced(store_url):
    client = aioredis.Redis.from_url(store_url, socket_timeout=5)
    admin = aioredis.Redis.from_url(store_url)
    feed = FeedConnection(client)
    try:
        await feed.transact([("PING",)])
        (me,) = await feed.transact([("CLIENT", "ID")])
        wait = ("XREAD", "COUNT", 1, "BLOCK", 3000, "STREAMS", "s", "$")
        waiting = asyncio.create_task(feed.transact([read("s", "0-0")], wait=wait))
        await asyncio.sleep(0.2)
        await admin.client_kill_filter(_id=me)
        with pytest.raises(redis.ConnectionError):
            await asyncio.wait_for(waiting, 2)
        (again,) = await feed.transact([("CLIENT", "ID")])
        assert again != me
    finally:
        await feed.close()
        await client.aclose()
        await admin.aclose()


def test_commands_are_packed_as_redis_py_packs_them() -> None:
    commands = [("MULTI",), ("XREAD", "COUNT", 1000, "STREAMS", "lv:changes:0", b"0-0"), ("EXEC",)]
    connection = redis.Connection()
    assert pack(commands) == b"".join(connection.pack_commands(commands))
    assert pack([("SET", "k", 1)]) == b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\n1\r\n"


def test_replies_of_either_protocol_take_redis_py_shapes() -> None:
    assert hash_of([b"a", b"1", b"b", b"2"]) == hash_of({b"a": b"1", b"b": b"2"})
    resp2 = [[b"s", [[b"1-0", [b"f", b"v"]]]]]
    resp3 = {b"s": [[b"1-0", [b"f", b"v"]]]}
    assert streams_of(resp2) == streams_of(resp3) == [[b"s", [(b"1-0", {b"f": b"v"})]]]
    assert streams_of(None) == streams_of({}) == []
