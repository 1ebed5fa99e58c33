"""The gateway's reading loops end when cancelled, even when a store call swallowed the cancel
(``tests.support.cancels``): a loop that only ended on ``CancelledError`` then read on, and
``Gateway.stop()`` waited for it forever. The feeds read the real store; only their read is
wrapped so that its first cancel is swallowed.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest
import redis

from liveviews.gateway.fanout.hub import Hub
from liveviews.gateway.feed.changes import ChangeFeed
from liveviews.gateway.feed.log import StoreLogFeed
from liveviews.gateway.feed.store import Layout, connect
from liveviews.gateway.metrics import Metrics
from tests.support.cancels import SwallowOnce
from tests.support.gateway_settings import PARTITIONS, SHARDS


def change_feed(url: str) -> ChangeFeed:
    return ChangeFeed(connect(url, blocking_ms=50), Hub(Metrics()), Layout(PARTITIONS, SHARDS),
                      Metrics(), block_ms=50)  # fmt: skip


def log_feed(url: str) -> StoreLogFeed:
    return StoreLogFeed(connect(url, blocking_ms=50), PARTITIONS, block_ms=50)


@pytest.mark.parametrize("make", [change_feed, log_feed], ids=["change feed", "log feed"])
async def test_a_feed_ends_when_a_read_swallowed_its_cancel(
    store: redis.Redis, store_url: str, make: Any
) -> None:
    """On a flushed store (``store``), in the layout of ``tests/server``'s gateways: they keep
    running across tests and write theirs into a flushed store, which a feed of another layout
    would refuse, reading on."""
    feed = make(store_url)
    read = SwallowOnce(feed._read)
    feed._read = read
    task = asyncio.create_task(feed.run())
    try:
        await read.cancel_after_answer(task)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(task, 5)
        await feed.client.aclose()
