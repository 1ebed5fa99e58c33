"""``liveviews.gateway.presence.Presence``: a gateway's report for ``liveviews status``, written, refreshed,
pruned of other processes' stale reports and withdrawn, against the real store."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis
import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from liveviews.gateway.presence import Presence
from liveviews.gateway.report import GATEWAYS_KEY, GatewayReport, decode, encode, own_name
from liveviews.store.embedded import free_port
from tests.support.cancels import SwallowOnce
from tests.support.gateway import wait_for


@pytest.fixture()
async def aclient(store: redis.Redis, store_url: str) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(store_url)
    yield client
    await client.aclose()


async def stop(task: asyncio.Task[None]) -> None:
    task.cancel()
    # Bounded, so that a task that runs on after its cancel fails the test instead of hanging it.
    await asyncio.wait({task}, timeout=10)
    assert task.done(), "the task ran on after it was cancelled"
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def test_a_gateway_reports_refreshes_prunes_and_withdraws(
    store: redis.Redis, aclient: aioredis.Redis
) -> None:
    now = time.time()
    store.hset(GATEWAYS_KEY, "gone:1", encode(1, {}, now - 100))  # stopped long ago
    store.hset(GATEWAYS_KEY, "other:2", encode(2, {"likes": 1}, now))  # alive
    store.hset(GATEWAYS_KEY, "newer:3", b'{"format": 2}')  # not a report this gateway knows
    counts = {"connections": 3}
    presence = Presence(aclient, lambda: counts["connections"], lambda: {"profiles": 2},
                        interval=0.05, stale=5)  # fmt: skip
    assert presence.name == own_name()
    task = asyncio.create_task(presence.run())

    def mine() -> GatewayReport:
        raw: Any = store.hget(GATEWAYS_KEY, own_name())
        return decode(own_name(), raw)

    try:
        # Its first report prunes the stale report of another process, and only that one.
        await wait_for(lambda: set(store.hkeys(GATEWAYS_KEY))
                       == {own_name().encode(), b"other:2", b"newer:3"})  # fmt: skip
        first = mine()
        assert (first.connections, first.subscribers) == (3, {"profiles": 2})
        counts["connections"] = 4  # read again at each report
        await wait_for(lambda: mine().connections == 4)
        assert mine().at > first.at
    finally:
        await stop(task)
    await presence.withdraw()
    assert set(store.hkeys(GATEWAYS_KEY)) == {b"other:2", b"newer:3"}


async def test_store_errors_are_retried_never_raised(
    store: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    gone = aioredis.Redis(port=free_port(), socket_connect_timeout=0.2, retry=Retry(NoBackoff(), 0))
    presence = Presence(gone, lambda: 0, dict, interval=0.02, name="test:1")
    task = asyncio.create_task(presence.run())
    await asyncio.sleep(0.3)
    assert not task.done(), "it keeps trying"
    await stop(task)
    await presence.withdraw()  # logged, not raised
    await gone.aclose()
    warnings = [r for r in caplog.records if "report" in r.getMessage()]
    assert len(warnings) == 2, "one line while it fails, one for the withdrawal"


async def test_a_report_is_written_again_once_the_store_answers(
    store: redis.Redis, store_url: str
) -> None:
    client = aioredis.Redis.from_url(store_url)
    presence = Presence(client, lambda: 1, dict, interval=0.02, name="test:2")
    task = asyncio.create_task(presence.run())
    try:
        await wait_for(lambda: store.hexists(GATEWAYS_KEY, "test:2"))
        store.flushdb()  # the store was wiped
        await wait_for(lambda: store.hexists(GATEWAYS_KEY, "test:2"))
    finally:
        await stop(task)
        await client.aclose()


async def test_a_cancel_that_a_store_call_swallowed_still_stops_the_reports(
    aclient: aioredis.Redis,
) -> None:
    hset = SwallowOnce(aclient.hset)
    aclient.hset = hset  # type: ignore[method-assign]
    presence = Presence(aclient, lambda: 0, dict, interval=0.01, name="test:3")
    await hset.cancel_after_answer(asyncio.create_task(presence.run()))
