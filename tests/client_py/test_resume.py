"""Resume: a subscription that loses its connection while deltas keep coming resumes from its
last event id with no gap and no duplicate, whether the gateway restarted or the socket was
reset; when the history it needs is gone, it drops its rows and takes the fresh snapshot."""

from __future__ import annotations

import asyncio
import threading

import redis

from liveviews.client import ClientState, SubscriptionState
from tests.client_py.proxy import Proxy
from tests.client_py.support import Collected, client_of, task, titles
from tests.support.gateway import ServedGateway, Writer, stored_rows, wait_for
from tests.support.gateway_settings import SHARDS, settings_for


class Writing:
    """Writes ``t<n>`` to one key every few ms in a thread, n = 1, 2, ..., until stopped."""

    def __init__(self, writer: Writer, key: str) -> None:
        self.written = 0
        self._stop = threading.Event()
        self._writer, self._key = writer, key
        self._thread = threading.Thread(target=self._run)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.01):
            self._writer.write([("tasks", self._key, "task", task(f"t{self.written + 1}"))])
            self.written += 1

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.written


def assert_no_gap_and_no_duplicate(got: Collected, last: int) -> None:
    assert len(got.snapshots()) == 1, "resumed without a reset: one snapshot only"
    assert titles(got.deltas()) == [f"t{n}" for n in range(1, last + 1)]
    ids = [c.event_id for c in got.changes]
    assert len(set(ids)) == len(ids)


async def test_a_restarted_gateway_is_resumed_with_no_gap_and_no_duplicate(
    store_url: str, store: redis.Redis, writer: Writer
) -> None:
    settings = settings_for(store_url, LV_APP="tests.support.queryapp:app")
    served = ServedGateway(settings).start()
    try:
        async with client_of(served) as client:
            sub = client.subscribe("tasks", "b1/t1")
            got = Collected(sub)
            await sub.ready()
            writing = Writing(writer, "b1/t1")
            await got.until(lambda c: len(c) > 5)
            await asyncio.to_thread(served.stop)  # closes the socket with 1012
            assert client.state != ClientState.CONNECTED
            missed = len(got.changes)
            await asyncio.sleep(0.2)  # deltas the client is not there to receive
            served = ServedGateway(settings).start()  # the same port
            await got.until(lambda c: len(c) > missed + 20)
            assert client.state == ClientState.CONNECTED
            last = writing.stop()
            await got.until(lambda c: titles(c[-1:]) == [f"t{last}"])
            assert_no_gap_and_no_duplicate(got, last)
            assert dict(sub.rows) == stored_rows(store, "tasks", "b1/t1", SHARDS)
            await got.stop()
    finally:
        served.stop()


async def test_a_reset_socket_is_resumed_with_no_gap_and_no_duplicate(
    proxy: Proxy, gateway: ServedGateway, writer: Writer
) -> None:
    async with client_of(gateway, url=proxy.url) as client:
        subs = [client.subscribe("tasks", "b1/t1"), client.subscribe("tasks", prefix="b1/")]
        got = [Collected(sub) for sub in subs]
        for sub in subs:
            await sub.ready()
        writing = Writing(writer, "b1/t1")
        for cuts in range(3):
            await wait_for(
                lambda n=cuts: proxy.connections == n + 1 and client.state == "connected"
            )
            seen = len(got[0].changes)
            await got[0].until(lambda c, seen=seen: len(c) > seen + 5)
            proxy.cut()
        await wait_for(lambda: proxy.connections == 4 and client.state == "connected")
        await asyncio.sleep(0.1)
        last = writing.stop()
        for each in got:
            await each.until(lambda c: titles(c[-1:]) == [f"t{last}"])
            assert_no_gap_and_no_duplicate(each, last)
            await each.stop()
        assert proxy.connections == 4, "one socket for both subscriptions"


async def test_a_resume_past_the_history_resets_and_takes_the_fresh_snapshot(
    proxy: Proxy, gateway: ServedGateway, store: redis.Redis
) -> None:
    from tests.support.queryapp import app

    small = Writer(store, app, SHARDS, retention=10)
    small.write([("tasks", "b1/t1", "task", task("before")), ("tasks", "b1/t1", "gone", 1)])
    async with client_of(gateway, url=proxy.url) as client:
        sub = client.subscribe("tasks", "b1/t1")
        got = Collected(sub)
        await sub.ready()
        proxy.down = True
        proxy.cut()
        await asyncio.sleep(0.1)
        assert sub.state == SubscriptionState.RECONNECTING
        small.write([("tasks", "b1/t1", "gone", None)])
        for i in range(300):  # the key's shard keeps only the last 10 entries
            small.write([("tasks", "b1/t1", "task", task(f"away {i}"))])
        proxy.down = False
        await got.until(lambda c: len(c) == 2)
        fresh = got.changes[1]
        assert (fresh.kind, fresh.was_recovering, fresh.reason) == (
            "snapshot",
            True,
            "history_trimmed",
        )
        assert fresh.contents == {"task": {"title": "away 299"}}
        assert dict(sub.rows) == stored_rows(store, "tasks", "b1/t1", SHARDS)
        assert sub.state == SubscriptionState.LIVE and sub.reset is None
        small.write([("tasks", "b1/t1", "task", task("after"))])
        await got.until(lambda c: len(c) == 3)
        assert titles(got.changes[2:]) == ["after"]
        await got.stop()
