"""The subscription's ordering rule, with the change feed driven step by step.

Over a real server these races are rare, so here the feed reads only when the test says, and a
store client that runs a step right after a transaction returns (a fake at the store's edge)
puts a write and a feed read exactly between reading the snapshot or history and delivering it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any

import redis
import redis.asyncio as aioredis

from liveviews.gateway.fanout.subscription import Source, Subscription
from liveviews.gateway.gateway import Gateway
from tests.support.gateway import Writer
from tests.support.gateway_settings import settings_for


class SteppedClient(aioredis.Redis):
    """Runs ``after`` once, right after the next transaction's results come back."""

    after: Callable[[], Awaitable[None]] | None = None

    def pipeline(self, transaction: bool = True, shard_hint: Any = None) -> Any:
        pipe = super().pipeline(transaction, shard_hint)
        step, self.after = self.after, None
        if step is None:
            return pipe
        execute = pipe.execute

        async def execute_then_step(raise_on_error: bool = True) -> Any:
            result = await execute(raise_on_error)
            await step()
            return result

        pipe.execute = execute_then_step  # type: ignore[method-assign]
        return pipe


def deltas(frames: list[Any]) -> list[list[Any]]:
    import orjson

    return [orjson.loads(f.data)["ops"] for f in frames if f.event == "delta"]


async def test_deltas_read_around_the_snapshot_arrive_once(
    store_url: str, store: redis.Redis, writer: Writer
) -> None:
    gw = Gateway(settings_for(store_url))
    client = SteppedClient.from_url(store_url)
    source: Source = dataclasses.replace(gw.source, client=client)
    try:
        await gw.feed._start()
        writer.write([("likes", "t", "before", {"v": 0})])

        async def write_and_feed() -> None:
            writer.write([("likes", "t", "between", {"v": 1})])
            await gw.feed._read()

        client.after = write_and_feed
        sub = Subscription(source, "likes", "t", None)
        first = await sub.start()
        assert [f.event for f in first] == ["snapshot"]
        writer.write([("likes", "t", "after", {"v": 2})])
        await gw.feed._read()
        got = deltas(await sub.next_frames())
        # "before" is in the snapshot and was fed after attaching: not sent again.
        # "between" was written after the snapshot and fed before start() returned.
        assert [ops[0]["row"] for ops in got] == ["between", "after"]
        resume = sub.last_event_id
        sub.close()

        writer.write([("likes", "t", "missed", {"v": 3})])

        async def write_and_feed_again() -> None:
            writer.write([("likes", "t", "during", {"v": 4})])
            await gw.feed._read()

        client.after = write_and_feed_again
        from liveviews.gateway.wire.eventid import EventId

        assert resume is not None
        sub = Subscription(source, "likes", "t", EventId.parse(resume))
        caught_up = deltas(await sub.start())
        live = deltas(await sub.next_frames())
        assert [ops[0]["row"] for ops in caught_up + live] == ["missed", "during"]
        sub.close()
    finally:
        await client.aclose()
        await gw.stop()
