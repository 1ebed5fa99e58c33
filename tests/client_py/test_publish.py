"""Publishing once: a batch sent again under its idempotency key (by the application, or by the
client when the answer was lost) is appended once and answered with the same offsets; and
``reflects`` returns once the subscription's view has the batch."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest
import redis

from liveviews.client import ConnectionLost, Offset
from liveviews.log.events import log_stream
from tests.client_py.proxy import Proxy
from tests.client_py.support import Collected, client_of
from tests.support.gateway import ServedGateway, Writer
from tests.support.gateway_settings import PARTITIONS


def task_set(title: str) -> dict[str, object]:
    return {"type": "task_set", "payload": {"board": "b1", "task": "t1", "title": title}}


def appended(store: redis.Redis) -> int:
    return sum(store.xlen(log_stream(p)) for p in range(PARTITIONS))


async def test_a_batch_sent_twice_under_one_key_is_appended_once(
    gateway: ServedGateway, store: redis.Redis
) -> None:
    async with client_of(gateway, user="b1") as client:
        over_http = await client.publish([task_set("once")], idempotency_key="batch-1")
        again = await client.publish([task_set("once")], idempotency_key="batch-1")
        sub = client.subscribe("tasks", "b1/t1")
        await sub.ready()
        over_socket = await client.publish([task_set("once")], idempotency_key="batch-1")
        assert over_http == again == over_socket and len(over_http) == 1
        assert isinstance(over_http[0], Offset) and appended(store) == 1
        fresh = await client.publish([task_set("once")])
        assert fresh != over_http and appended(store) == 2, "a new batch gets a key of its own"


async def test_a_publish_whose_answer_is_lost_is_sent_again_under_its_key(
    proxy: Proxy, gateway: ServedGateway, store: redis.Redis
) -> None:
    async with client_of(gateway, url=proxy.url, user="b1") as client:
        sub = client.subscribe("tasks", "b1/t1")
        await sub.ready()
        proxy.swallow = True  # the gateway appends the batch; its answer never arrives
        publishing = asyncio.create_task(client.publish([task_set("lost answer")]))
        await asyncio.sleep(0.3)
        assert not publishing.done() and appended(store) == 1
        proxy.swallow = False
        proxy.cut()
        offsets = await asyncio.wait_for(publishing, 10)
        assert appended(store) == 1
        entries = cast(list[tuple[bytes, Any]], store.xrange(log_stream(offsets[0].partition)))
        assert [entry_id.decode() for entry_id, _ in entries] == [offsets[0].id]


async def test_a_publish_that_cannot_get_an_answer_fails_with_its_key(
    proxy: Proxy, gateway: ServedGateway
) -> None:
    async with client_of(gateway, url=proxy.url, user="b1", publish_retries=1) as client:
        proxy.down = True
        with pytest.raises(ConnectionLost) as lost:
            await client.publish([task_set("nowhere")], idempotency_key="kept")
        assert (lost.value.code, lost.value.idempotency_key) == ("connection_lost", "kept")


async def test_reflects_returns_once_the_view_has_the_published_events(
    gateway: ServedGateway, writer: Writer
) -> None:
    """The gateway of these tests sends progress every 4 s: a frontier within a second is the
    answer to the client's ``wait``."""
    async with client_of(gateway, user="b1") as client:
        sub = client.subscribe("tasks", "b1/t1")
        got = Collected(sub)
        await sub.ready()
        for title in ["first", "second"]:
            offsets = await client.publish([task_set(title)])
            waiting = asyncio.create_task(sub.reflects(offsets))
            await asyncio.sleep(0.2)
            assert not waiting.done(), "no frontier covers the offset yet"
            # What the pipeline does with the event: the view's delta, then the frontier past it.
            (offset,) = offsets
            writer.write(
                [("tasks", "b1/t1", "task", {"title": title})], {offset.partition: offset.id}
            )
            await asyncio.wait_for(waiting, 1.5)
            assert dict(sub.rows) == {"task": {"title": title}}, "the delta came before"
        assert [c.kind for c in got.changes] == ["snapshot", "delta", "delta"]
        await sub.reflects(str(offset))  # covered already: at once
        await got.stop()
