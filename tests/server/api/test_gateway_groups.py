"""Groups of subscriptions over WebSocket: released together at cuts, never half a change.

Chirp's ``profiles`` and ``timeline`` views are written by two pipelines, played here by the
test through the real sink of each: each pipeline writes a batch when the test says, and ends
one exactly at each cut the gateway appends, as the pipelines' sources do
(tests/streaming/pipeline/test_cuts.py). A rename reaches one pipeline's view before the
other's; the group's client must never see one name in the profile and another in the
timeline, and must see every name in the end.
"""

from __future__ import annotations

import asyncio
import base64
from typing import Any

import aiohttp
import orjson
import redis

from demo.chirp import app
from demo.chirp.generate import Activity
from liveviews.changes.cuts import CUTS_STREAM
from liveviews.log.eventlog import EventLog
from liveviews.pipeline import versions
from liveviews.pipeline.sink import ChangeTopicSink
from tests.server.api.test_gateway_ws import Socket, connect
from tests.support.gateway import ServedGateway, Writer, open_sse
from tests.support.gateway_settings import PARTITIONS, SHARDS
from tests.support.groups import apply_group_frame


class Pipelines:
    """The two pipelines of the test: batches of each written through its own sink."""

    def __init__(self, store: redis.Redis, writer: Writer) -> None:
        self.store = store
        self.writer = writer
        self.log = EventLog(store, app, PARTITIONS)
        self.cuts_seen = "0-0"
        self.batches = {"profiles": 0, "entities": 0}

    def append(self, n: int = 1) -> dict[int, str]:
        """Events appended to the log; its heads after them."""
        self.log.append_batch(Activity(users=10, seed=len(self.cuts_seen)).take(n))
        heads = {}
        for p in range(PARTITIONS):
            last = self.store.xrevrange(f"lv:log:{p}", count=1)
            heads[p] = last[0][0].decode() if last else "0-0"
        return heads

    async def next_cut(self, timeout: float = 10) -> dict[int, str]:
        """The next cut the gateway appends, as a batch's end."""
        async with asyncio.timeout(timeout):
            while True:
                read = await asyncio.to_thread(
                    self.store.xread, {CUTS_STREAM: self.cuts_seen}, count=1, block=200
                )
                if read:
                    entry_id, fields = read[0][1][0]
                    self.cuts_seen = entry_id.decode()
                    return {int(k): v.decode() for k, v in fields.items() if k != b"pipelines"}

    def batch(self, pipeline: str, frontier: dict[int, str], *changes: tuple[str, str, str, Any]):
        """One micro-batch of ``pipeline``: its row changes, then its frontier."""
        self.batches[pipeline] += 1
        rows = [{"view": v, "key": k, "row": r, "value": orjson.dumps(val).decode(),
                 "score": 0.0} for v, k, r, val in changes]  # fmt: skip
        self.writer.sinks[pipeline].write(rows, self.batches[pipeline], frontier)

    def rename(self, pipeline: str, frontier: dict[int, str], name: str) -> None:
        if pipeline == "profiles":
            self.batch(pipeline, frontier, ("profiles", "ann", "profile", {"name": name}))
        else:
            self.batch(
                pipeline,
                frontier,
                ("timeline", "ann", "ann:1", {"text": "hi", "author": {"name": name}}),
            )


class Page:
    """What the group's client shows: each member's rows, changed only by whole group frames."""

    def __init__(self, sock: Socket) -> None:
        self.sock = sock
        self.rows: dict[str, dict[str, Any]] = {"p": {}, "t": {}}
        self.shown: list[tuple[str | None, str | None]] = []
        self.ids: dict[str, str] = {}

    async def next_group_frame(self, timeout: float = 10) -> dict[str, Any]:
        msg = await self.sock.next(timeout)
        assert msg["type"] == "group" and msg["sub"] == "g", msg
        apply_group_frame(msg["data"], self.rows, self.ids)
        profile = self.rows["p"].get("profile", {}).get("name")
        tweet = self.rows["t"].get("ann:1", {}).get("author", {}).get("name")
        self.shown.append((profile, tweet))
        assert profile == tweet, f"half a change shown: profile {profile}, timeline {tweet}"
        return dict(msg["data"])


async def open_page(s: aiohttp.ClientSession, gateway: ServedGateway) -> Page:
    """Ann's socket, subscribed to her profile (``p``) and timeline (``t``) as group ``g``."""
    sock = await connect(s, gateway, gateway.token("ann"))
    assert (await sock.next())["type"] == "authenticated"
    await sock.send(type="subscribe", sub="g", members=[
        {"sub": "p", "view": "profiles", "key": "ann"},
        {"sub": "t", "view": "timeline", "key": "ann"}])  # fmt: skip
    return Page(sock)


async def test_a_group_shows_each_rename_in_both_views_at_once(
    gateway: ServedGateway, store: redis.Redis, writer: Writer
) -> None:
    pipelines = Pipelines(store, writer)
    first = pipelines.append()
    pipelines.rename("profiles", first, "A")
    pipelines.rename("entities", first, "A")
    async with aiohttp.ClientSession() as s:
        page = await open_page(s, gateway)
        cut = await pipelines.next_cut()
        assert cut == first  # both pipelines are at it already: released at once
        opened = await page.next_group_frame()
        assert [f["type"] for f in opened["frames"]] == ["snapshot", "snapshot"]
        assert page.shown == [("A", "A")]

        # ``profiles`` reads on past the log's heads at once; the gateway's next cut is there,
        # and the group waits for ``entities`` to end a batch at it too.
        heads = pipelines.append()
        pipelines.rename("profiles", heads, "B")
        cut = await pipelines.next_cut()
        assert cut == heads
        try:
            early = await page.next_group_frame(timeout=0.5)
        except TimeoutError:
            early = None
        assert early is None, early
        pipelines.rename("entities", cut, "B")
        await page.next_group_frame()
        assert page.shown[-1] == ("B", "B")

        # A batch of ``profiles`` past the cut is held back until the next one.
        heads = pipelines.append()
        pipelines.rename("profiles", heads, "C")
        cut = await pipelines.next_cut()
        after = pipelines.append()
        pipelines.rename("profiles", after, "D")
        pipelines.rename("entities", cut, "C")
        released = await page.next_group_frame()
        assert page.shown[-1] == ("C", "C")
        assert released["frontier"] == {str(p): at for p, at in cut.items()}
        cut = await pipelines.next_cut()
        assert cut == after
        pipelines.rename("entities", cut, "D")
        await page.next_group_frame()
        assert page.shown == [("A", "A"), ("B", "B"), ("C", "C"), ("D", "D")]


async def test_a_group_resumes_each_member_from_its_id(
    gateway: ServedGateway, store: redis.Redis, writer: Writer
) -> None:
    """A client that reconnects subscribes the group again with each member's last id: it is
    sent what it missed, and nothing twice."""
    pipelines = Pipelines(store, writer)
    heads = pipelines.append()
    pipelines.rename("profiles", heads, "A")
    pipelines.rename("entities", heads, "A")
    async with aiohttp.ClientSession() as s:
        sock = await connect(s, gateway, gateway.token("ann"))
        assert (await sock.next())["type"] == "authenticated"
        members = [{"sub": "p", "view": "profiles", "key": "ann"},
                   {"sub": "t", "view": "timeline", "key": "ann"}]  # fmt: skip
        await sock.send(type="subscribe", sub="g", members=members)
        page = Page(sock)
        await pipelines.next_cut()
        await page.next_group_frame()
        released = dict(page.ids)
        await sock.ws.close()

        heads = pipelines.append()
        pipelines.rename("profiles", heads, "B")
        pipelines.rename("entities", heads, "B")

        sock = await connect(s, gateway, gateway.token("ann"))
        assert (await sock.next())["type"] == "authenticated"
        await sock.send(type="subscribe", sub="g", members=[
            {**m, "last_event_id": released[m["sub"]]} for m in members])  # fmt: skip
        again = Page(sock)
        again.rows = page.rows
        await pipelines.next_cut()
        resumed = await again.next_group_frame()
        assert [f["type"] for f in resumed["frames"]] == ["delta", "delta"]
        assert again.shown == [("B", "B")]


async def test_a_member_whose_pipeline_switches_version_is_reset_in_a_group_frame(
    gateway: ServedGateway, store: redis.Redis, writer: Writer
) -> None:
    """A rebuilt version of ``profiles`` starts to serve readers: the group's member is reset
    onto it, with the new version's snapshot, in a group frame that shows the timeline at the
    same cut; renames after the switch still reach both members at once."""
    versions.register(store, "profiles", "aaa", b"{}")
    pipelines = Pipelines(store, writer)
    first = pipelines.append()
    pipelines.rename("profiles", first, "A")
    pipelines.rename("entities", first, "A")
    async with aiohttp.ClientSession() as s:
        page = await open_page(s, gateway)
        await page.next_group_frame()
        assert page.shown == [("A", "A")]

        reg = versions.begin(store, "profiles", "bbb", "bbb")
        assert reg.next is not None
        rebuilt = ChangeTopicSink(store, app, "profiles", SHARDS, 10_000, list(app.pipelines),
                                  namespace=reg.next.namespace)  # fmt: skip
        profile = {"view": "profiles", "key": "ann", "row": "profile", "score": 0.0}
        rebuilt.write([{**profile, "value": orjson.dumps({"name": "A"}).decode()}], 1, first)
        versions.switch(store, "profiles", SHARDS)
        switched = await page.next_group_frame()
        assert [(f["sub"], f["type"]) for f in switched["frames"]] == [
            ("p", "reset"), ("p", "snapshot")]  # fmt: skip
        assert page.shown[-1] == ("A", "A")

        heads = pipelines.append()
        rebuilt.write([{**profile, "value": orjson.dumps({"name": "B"}).decode()}], 2, heads)
        pipelines.rename("entities", heads, "B")
        renamed = await page.next_group_frame()
        assert sorted(f["sub"] for f in renamed["frames"]) == ["p", "t"]
        assert page.shown == [("A", "A"), ("A", "A"), ("B", "B")]


async def test_a_group_is_refused_with_a_sentence_when_malformed(gateway: ServedGateway) -> None:
    async with aiohttp.ClientSession() as s:
        sock = await connect(s, gateway, gateway.token("ann"))
        assert (await sock.next())["type"] == "authenticated"
        for members, says in [
            ([], "1 to 16"),
            ([{"sub": "p", "view": "profiles"}], "names a 'view' and a 'key'"),
            ([{"sub": "p", "view": "profiles", "key": "a"}] * 2, "twice"),
            ([{"sub": "p", "view": "timeline", "key": "bob"}], "forbidden"),
        ]:
            await sock.send(type="subscribe", sub="g", members=members)
            error = await sock.next()
            assert error["type"] == "error" and error["sub"] == "g", error
            assert says in error["message"] or says == error["code"], error
            assert "Traceback" not in str(error)


def test_a_group_event_id_is_opaque_and_holds_each_member_id() -> None:
    from liveviews.gateway.wire.eventid import group_event_id

    made = group_event_id({"t": "e.2-0", "p": "e.1-0"})
    assert made.startswith("g.")
    raw = made[2:] + "=" * (-len(made[2:]) % 4)
    assert orjson.loads(base64.urlsafe_b64decode(raw)) == {"p": "e.1-0", "t": "e.2-0"}


async def test_a_group_over_sse_is_one_stream_that_resumes_from_its_id(
    gateway: ServedGateway, store: redis.Redis, writer: Writer
) -> None:
    """``/v1/groups/live`` carries the group's frames in one SSE stream; its event id holds each
    member's, and a stream opened again from it is sent only what it missed."""
    pipelines = Pipelines(store, writer)
    heads = pipelines.append()
    pipelines.rename("profiles", heads, "A")
    pipelines.rename("entities", heads, "A")
    url = f"{gateway.url}/v1/groups/live?view=profiles&key=ann&view=timeline&key=ann"
    async with aiohttp.ClientSession() as s:
        sse = await open_sse(s, url, gateway.headers("ann"))
        await pipelines.next_cut()
        opened = await sse.next(skip=("heartbeat",))
        assert opened.event == "group" and opened.id is not None and opened.id.startswith("g.")
        assert [(f["sub"], f["type"]) for f in opened.data["frames"]] == [
            ("m0", "snapshot"), ("m1", "snapshot")]  # fmt: skip
        await sse.close()

        heads = pipelines.append()
        pipelines.rename("profiles", heads, "B")
        pipelines.rename("entities", heads, "B")
        again = await open_sse(s, url, {**gateway.headers("ann"), "Last-Event-ID": opened.id})
        await pipelines.next_cut()
        resumed = await again.next(skip=("heartbeat",))
        assert [(f["sub"], f["type"], f["data"]["ops"][0]["value"]) for f in
                resumed.data["frames"]] == [
            ("m0", "delta", {"name": "B"}),
            ("m1", "delta", {"text": "hi", "author": {"name": "B"}})]  # fmt: skip
        await again.close()

        for query, says in [("view=profiles", "in pairs"), ("", "in pairs"),
                            ("view=timeline&key=bob", "forbidden")]:  # fmt: skip
            async with s.get(f"{gateway.url}/v1/groups/live?{query}",
                             headers=gateway.headers("ann")) as bad:  # fmt: skip
                body = await bad.json()
                assert bad.status in (400, 403) and (
                    says in body["message"] or says == body["code"]
                ), body
        async with s.get(url, headers={**gateway.headers("ann"), "Last-Event-ID": "e.1-0"}) as bad:
            assert (bad.status, (await bad.json())["code"]) == (400, "invalid_last_event_id")
