"""``client.group``: keys followed as one, each group frame applied whole; a resume from each
member's last id; the members checked when the group is opened.

The queries application's one pipeline is played by the test through the real sink: its
batches end where the gateway's cuts say, as its source's would (tests/streaming/pipeline/
test_cuts.py)."""

from __future__ import annotations

import asyncio

import orjson
import pytest
import redis

from liveviews.changes.cuts import CUTS_STREAM
from liveviews.client import Group, SubscriptionState
from liveviews.log.eventlog import EventLog
from tests.client_py.proxy import Proxy
from tests.client_py.support import Collected, client_of, task
from tests.support.gateway import ServedGateway, Writer
from tests.support.gateway_settings import PARTITIONS
from tests.support.queryapp import app


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


async def test_a_group_applies_each_frame_whole_and_resumes_each_member(
    gateway: ServedGateway, store: redis.Redis, writer: Writer, proxy: Proxy
) -> None:
    pipeline = Pipeline(store, writer)
    pipeline.write(pipeline.heads(), ("tasks", "b1/t1", "task", task("one")),
                   ("tasks", "b1/t2", "task", task("two")))  # fmt: skip
    async with client_of(gateway, url=proxy.url, transport="websocket") as client:
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

        proxy.cut()  # the client resumes each member from the last id it applied
        pipeline.write(pipeline.heads(), ("tasks", "b1/t2", "task", task("two''")))
        await got.until(lambda c: len(c) == 3, timeout=15)
        assert got.changes[-1].kind == "delta"  # resumed, not started over
        assert dict(group.members[1].rows) == {"task": {"title": "two''"}}
        assert len(got.snapshots()) == 1
        await got.stop()


async def test_a_group_is_checked_when_it_is_opened(gateway: ServedGateway) -> None:
    async with client_of(gateway, transport="websocket") as client:
        with pytest.raises(ValueError, match="1 to 16"):
            client.group([])
        with pytest.raises(ValueError, match="non-empty key"):
            client.group([("tasks", "")])
    async with client_of(gateway, transport="sse") as client:
        with pytest.raises(ValueError, match="over WebSocket only"):
            client.group([("tasks", "b1/t1")])
