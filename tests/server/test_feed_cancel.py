"""The gateway's reading loops end when cancelled, even when a store call swallowed the cancel.

redis-py's asyncio client sends each command through ``asyncio.wait_for`` when it has a socket
timeout (every client since redis-py 8, and the gateway's own always). On Python 3.11 that
``wait_for`` returns the command's answer instead of raising when the cancel arrives as the
answer does (CPython gh-86296): a loop that only ended on ``CancelledError`` then read on, and
``Gateway.stop()`` waited for it forever. The feeds here read the real store; only their read
is wrapped so that its first cancel is swallowed, as that ``wait_for`` does.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

import redis

from liveviews.gateway.fanout.hub import Hub
from liveviews.gateway.feed import store as feed_store
from liveviews.gateway.feed.changes import ChangeFeed
from liveviews.gateway.feed.log import StoreLogFeed
from liveviews.gateway.metrics import Metrics


class SwallowOnce:
    """Wraps a read: the first cancel that arrives while it runs is swallowed, and the read
    answers as if nothing happened; later cancels go through, so a failing test ends."""

    def __init__(self, read: Callable[..., Awaitable[Any]]) -> None:
        self.read = read
        self.swallowed = 0
        self.reading = asyncio.Event()

    async def __call__(self, *args: Any, **kwargs: Any) -> Any:
        answer = await self.read(*args, **kwargs)
        self.reading.set()
        try:
            await asyncio.sleep(0.05)  # the answer is on its way back when the cancel comes
        except asyncio.CancelledError:
            if self.swallowed:
                raise
            self.swallowed += 1
        return answer


async def _cancel_while_reading(task: asyncio.Task[None], read: SwallowOnce) -> None:
    async with asyncio.timeout(10):
        await read.reading.wait()
    task.cancel()
    await asyncio.wait({task}, timeout=5)
    assert read.swallowed == 1
    assert task.cancelled(), "the feed read on after it was cancelled"


async def test_the_change_feed_ends_when_a_read_swallowed_its_cancel(
    store: redis.Redis, store_url: str
) -> None:
    """On a flushed store, which takes this feed's layout."""
    feed_client = _connect(store_url)
    feed = ChangeFeed(feed_client, Hub(Metrics()), _layout(), Metrics(), block_ms=50)
    read = SwallowOnce(feed._read)
    feed._read = read  # type: ignore[method-assign]
    task = asyncio.create_task(feed.run())
    try:
        await _cancel_while_reading(task, read)
    finally:
        await _reap(task)
        await feed_client.aclose()


async def test_the_log_feed_ends_when_a_read_swallowed_its_cancel(
    store: redis.Redis, store_url: str
) -> None:
    feed = StoreLogFeed(_connect(store_url), 2, block_ms=50)
    read = SwallowOnce(feed._read)
    feed._read = read  # type: ignore[method-assign]
    task = asyncio.create_task(feed.run())
    try:
        await _cancel_while_reading(task, read)
    finally:
        await _reap(task)
        await feed._close()


def _connect(url: str) -> feed_store.Client:
    return feed_store.connect(url, blocking_ms=50)


def _layout() -> feed_store.Layout:
    return feed_store.Layout(2, 2)


async def _reap(task: asyncio.Task[None]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.wait_for(task, 5)
