"""``client.group``, over WebSocket and over SSE: keys followed as one, each group frame applied
whole; a resume from the last id applied (each member's over WebSocket, the group frame's over
SSE); ``reflects`` answered by a cut the wait asked for; the members checked when the group is
opened; a group moved to SSE when the client falls back.

The queries application's one pipeline is played by the test through the real sink: its
batches end where the gateway's cuts say, as its source's would (tests/streaming/pipeline/
test_cuts.py)."""

from __future__ import annotations

import asyncio
import re

import orjson
import pytest
import redis

from liveviews.changes.cuts import CUTS_STREAM
from liveviews.client import GatewayError, Group, SubscriptionState
from liveviews.client.offsets import covers
from liveviews.log.eventlog import EventLog
from tests.client_py.noupgrade import NoWebSocketProxy
from tests.client_py.proxy import Proxy
from tests.client_py.support import Collected, client_of, task
from tests.client_py.test_publish import task_set
from tests.client_py.test_sse import streams_opened, waits_posted
from tests.support.gateway import ServedGateway, Writer, wait_for
from tests.support.gateway_settings import PARTITIONS
from tests.support.queryapp import app

TRANSPORTS = pytest.mark.parametrize("transport", ["websocket", "sse"])
GROUP_PATH = "/v1/groups/live?view=tasks&key=b1/t1&view=tasks&key=b1/t2"
"""A group's stream as ``streams_opened`` shows it: the members in pairs, in order."""
REQUEST_HEAD = re.compile(rb"GET /v1/groups/live\S* HTTP/1\.1\r\n.*?\r\n\r\n", re.S)
RESUMED_FROM = re.compile(rb"(?im)^last-event-id: (\S+)\r$")


def resumed_from(proxy: Proxy) -> list[str | None]:
    """The ``Last-Event-ID`` of each group stream the clients asked for, None where none."""
    heads = REQUEST_HEAD.findall(proxy.sent)
    return [m.group(1).decode() if (m := RESUMED_FROM.search(h)) else None for h in heads]


class Pipeline:
    """The queries pipeline: a batch of changes ending at the log's heads, or at a cut."""

    def __init__(self, store: redis.Redis, writer: Writer) -> None:
        self.store, self.writer = store, writer
        self.seen = "0-0"
        self.batch = 0

    def heads(self) -> dict[int, str]:
        EventLog(self.store, app, PARTITIONS).append_batch(
            [{"type": "task_set", "payload": {"board": "x", "task": "y", "title": "z"}}]
        )
        return {p: (e[0][0].decode() if (e := self.store.xrevrange(f"lv:log:{p}", count=1))
                    else "0-0") for p in range(PARTITIONS)}  # fmt: skip

    async def cut(self) -> dict[int, str]:
        async with asyncio.timeout(10):
            while True:
                read = await asyncio.to_thread(self.store.xread, {CUTS_STREAM: self.seen},
                                               count=100, block=200)  # fmt: skip
                if read:
                    entry_id, fields = read[0][1][-1]
                    self.seen = entry_id.decode()
                    return {int(p): v.decode() for p, v in fields.items() if p != b"pipelines"}

    def write(self, frontier: dict[int, str], *changes: tuple[str, str, str, dict[str, str]]):
        self.batch += 1
        rows = [{"view": v, "key": k, "row": r, "value": orjson.dumps(val).decode(),
                 "score": 0.0} for v, k, r, val in changes]  # fmt: skip
        self.writer.sinks["queries"].write(rows, 1_000 + self.batch, frontier)


@TRANSPORTS
async def test_a_group_applies_each_frame_whole_and_resumes_each_member(
    transport: str, gateway: ServedGateway, store: redis.Redis, writer: Writer, proxy: Proxy
) -> None:
    pipeline = Pipeline(store, writer)
    pipeline.write(pipeline.heads(), ("tasks", "b1/t1", "task", task("one")),
                   ("tasks", "b1/t2", "task", task("two")))  # fmt: skip
    async with client_of(gateway, url=proxy.url, transport=transport) as client:
        group = client.group([("tasks", "b1/t1"), ("tasks", "b1/t2")])
        assert isinstance(group, Group)
        got = Collected(group)
        await pipeline.cut()  # the pipeline is at it already: the group opens at once
        await group.ready()
        assert [dict(m.rows) for m in group.members] == [
            {"task": {"title": "one"}}, {"task": {"title": "two"}}]  # fmt: skip
        assert group.state == SubscriptionState.LIVE

        pipeline.write(pipeline.heads(), ("tasks", "b1/t1", "task", task("one'")),
                       ("tasks", "b1/t2", "task", task("two'")))  # fmt: skip
        await got.until(lambda c: len(c) == 2)
        change = got.changes[-1]
        assert change.kind == "delta"
        assert change.contents == {"0": {"task": {"title": "one'"}},
                                   "1": {"task": {"title": "two'"}}}  # fmt: skip

        applied = group.last_event_id
        proxy.down = True  # the client is away while the next batch is written
        proxy.cut()
        pipeline.write(pipeline.heads(), ("tasks", "b1/t2", "task", task("two''")))
        await wait_for(lambda: group.state == SubscriptionState.RECONNECTING)
        proxy.down = False  # the client resumes from the last id it applied
        await got.until(lambda c: len(c) == 3, timeout=15)
        assert got.changes[-1].kind == "delta"  # resumed, not started over
        assert dict(group.members[1].rows) == {"task": {"title": "two''"}}
        assert len(got.snapshots()) == 1
        await got.stop()
    if transport == "sse":  # one stream for the group, asked for again from the group's id
        assert applied is not None and applied.startswith("g.")
        assert [path for path, _ in streams_opened(proxy)] == [GROUP_PATH] * 2
        assert resumed_from(proxy) == [None, applied]


@TRANSPORTS
async def test_reflects_on_a_group_is_answered_by_the_cut_its_wait_asked_for(
    transport: str, gateway: ServedGateway, store: redis.Redis, writer: Writer, proxy: Proxy
) -> None:
    """A gateway appends a cut only when one of its groups needs one: with nothing to release,
    the cut after the publish is the wait's (over SSE, posted under the group's stream id)."""
    pipeline = Pipeline(store, writer)
    pipeline.write(pipeline.heads(), ("tasks", "b1/t1", "task", task("one")))
    async with client_of(gateway, url=proxy.url, user="b1", transport=transport) as client:
        group = client.group([("tasks", "b1/t1"), ("tasks", "b1/t2")])
        await pipeline.cut()
        await group.ready()
        (offset,) = offsets = await client.publish([task_set("mine")])
        waiting = asyncio.create_task(group.reflects(offsets))
        frontier = await pipeline.cut()
        assert covers({str(p): at for p, at in frontier.items()}, offsets)
        assert not waiting.done(), "the pipeline has not reached the cut yet"
        pipeline.write(frontier, ("tasks", "b1/t1", "task", task("mine")))
        await asyncio.wait_for(waiting, 5)
        assert dict(group.members[0].rows) == {"task": {"title": "mine"}}, "applied with it"
    if transport == "sse":
        ((path, stream),) = streams_opened(proxy)
        assert path == GROUP_PATH
        assert waits_posted(proxy) == [(stream, {"offsets": [offset.to_dict()]})]


@TRANSPORTS
async def test_a_group_is_checked_when_it_is_opened(transport: str, gateway: ServedGateway) -> None:
    async with client_of(gateway, transport=transport) as client:
        with pytest.raises(ValueError, match="1 to 16"):
            client.group([])
        with pytest.raises(ValueError, match="non-empty key"):
            client.group([("tasks", "")])
        group = client.group([("tasks", "b1/t1"), ("drafts", "bob/d1")])
        with pytest.raises(GatewayError) as refused:  # a member alice may not read
            await group.ready()
        assert refused.value.code == "forbidden"
        assert refused.value.status == (403 if transport == "sse" else None)
        assert group.state == SubscriptionState.ERROR


async def test_a_group_moves_to_sse_when_the_client_falls_back(
    gateway: ServedGateway, store: redis.Redis, writer: Writer
) -> None:
    pipeline = Pipeline(store, writer)
    pipeline.write(pipeline.heads(), ("tasks", "b1/t1", "task", task("one")))
    front = await NoWebSocketProxy(gateway.settings.port).start()
    try:
        async with client_of(gateway, url=front.url) as client:
            group = client.group([("tasks", "b1/t1")])
            await pipeline.cut()
            await group.ready()
            assert (client.transport, front.refused) == ("sse", 2)
            assert dict(group.members[0].rows) == {"task": {"title": "one"}}
    finally:
        await front.close()
