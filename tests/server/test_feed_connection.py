"""The change feed's blocking reads give a silent connection up.

A store that stops answering (a partition that drops every packet, a frozen process) leaves a
blocking read waiting on a connection TCP may keep for minutes; after the partition heals, the
backed-off retransmissions held the feed of a gateway 10-12 s more (tests/faults/test_network.py
found it). The feed's client times a read out ``ANSWER_MARGIN_S`` after its wait ends, so the
feed reconnects instead.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time

import pytest
import redis

from liveviews.gateway.feed.store import ANSWER_MARGIN_S, connect
from liveviews.store.embedded import EmbeddedStore
from tests.support.gateway import free_port


async def test_a_blocking_read_of_a_silent_store_times_out(tmp_path):
    store = EmbeddedStore(tmp_path, free_port())
    url = store.start()
    client = connect(url, blocking_ms=100)
    try:
        assert await client.xread({"s": "0"}, block=100) == []  # answered: the wait ended
        assert store.process is not None
        os.kill(store.process.pid, signal.SIGSTOP)
        try:
            t0 = time.monotonic()
            with pytest.raises(redis.TimeoutError):
                await asyncio.wait_for(client.xread({"s": "0"}, block=100), 3 * ANSWER_MARGIN_S)
            assert time.monotonic() - t0 >= ANSWER_MARGIN_S  # a busy store has that long
        finally:
            os.kill(store.process.pid, signal.SIGCONT)
        assert await client.xread({"s": "0"}, block=100) == []  # a new connection answers
    finally:
        await client.aclose()
        store.stop()
