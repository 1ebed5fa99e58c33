"""A subscriber that does not keep up: memory stays bounded and the policy is applied.

The gateway under test keeps at most 8 frames per subscriber. The client stops reading while
megabytes of deltas are written, so the gateway's sends block and its buffer overflows; it
must then detach the subscriber and, once the client reads again, end the subscription with
``slow_consumer`` and the last id it delivered, from which the client resumes without a gap.
"""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

import aiohttp
import redis

from tests.support.gateway import (
    ServedGateway,
    State,
    Writer,
    open_sse,
    position,
    stored_rows,
    wait_for,
)

BIG = "x" * 40_000
DELTAS = 400


def write_big(writer: Writer, key: str, gw: ServedGateway, high_water: list[int]) -> None:
    capacity = gw.settings.subscriber_buffer
    for i in range(DELTAS):
        writer.write([("likes", key, "row", {"i": i, "pad": BIG})])
        if i % 20 == 0:
            writer.write([("likes", key, f"extra{i}", {"i": i})])
        fullest = max((len(s.buffer) for s in list(gw.gateway.hub.all)), default=0)
        high_water[0] = max(high_water[0], fullest)
        assert fullest <= capacity


async def test_a_slow_sse_subscriber_is_ended_with_a_resumable_id(
    tight_gateway: ServedGateway, store: redis.Redis, writer: Writer
) -> None:
    gw = tight_gateway
    metrics = gw.gateway.metrics
    before = metrics.slow_consumers

    async with aiohttp.ClientSession() as s:
        sse = await open_sse(s, gw.url + "/v1/views/likes/slow/live", gw.headers())
        state = State()
        state.apply(await sse.next())
        high_water = [0]
        await asyncio.to_thread(write_big, writer, "slow", gw, high_water)
        await wait_for(lambda: metrics.slow_consumers > before)
        assert metrics.subscriptions == 0  # detached: the hub holds nothing for it
        while True:  # now read what was on its way, up to the end frame
            ev = await sse.next(timeout=30)
            if ev.event == "end":
                break
            state.apply(ev)
        assert ev.data["code"] == "slow_consumer"
        assert ev.data["last_event_id"] == state.last_id
        headers = {**gw.headers(), "Last-Event-ID": ev.data["last_event_id"]}
        sse = await open_sse(s, gw.url + "/v1/views/likes/slow/live", headers)
        target = stored_rows(store, "likes", "slow", 8)
        while state.rows != target:
            state.apply(await sse.next(timeout=30, skip=("progress",)))
        assert state.resets == 0
        await sse.close()


async def test_a_slow_websocket_subscription_gets_an_error_with_its_last_id(
    tight_gateway: ServedGateway, store: redis.Redis, writer: Writer
) -> None:
    gw = tight_gateway
    metrics = gw.gateway.metrics
    before = metrics.slow_consumers

    # Heartbeats would keep each receive above from timing out: bound the whole exchange.
    async with asyncio.timeout(120):
        async with aiohttp.ClientSession() as s:
            ws = await s.ws_connect(gw.ws_url, params={"access_token": gw.token("alice")},
                                    max_msg_size=0)  # fmt: skip
            await ws.receive()
            await ws.send_str(json.dumps({"type": "subscribe", "sub": "w", "view": "likes",
                                          "key": "slowws"}))  # fmt: skip
            state = State()
            msgs: list[dict[str, Any]] = []

            def take(m: dict[str, Any]) -> None:
                from tests.support.gateway import Event

                if m["type"] in ("snapshot", "delta", "reset"):
                    state.apply(Event(m["type"], m.get("id"), m["data"]))
                msgs.append(m)

            take(json.loads((await ws.receive()).data))
            high_water = [0]
            done = threading.Event()
            await asyncio.to_thread(write_big, writer, "slowws", gw, high_water)
            done.set()
            await wait_for(lambda: metrics.slow_consumers > before, timeout=30)
            while True:
                m = json.loads((await asyncio.wait_for(ws.receive(), 30)).data)
                if m["type"] == "error":
                    break
                take(m)
            assert (m["code"], m["sub"]) == ("slow_consumer", "w")
            assert m["last_event_id"] == state.last_id
            await ws.send_str(json.dumps({"type": "subscribe", "sub": "w", "view": "likes",
                                          "key": "slowws",
                                          "last_event_id": m["last_event_id"]}))  # fmt: skip
            target = stored_rows(store, "likes", "slowws", 8)
            while state.rows != target:
                take(json.loads((await asyncio.wait_for(ws.receive(), 30)).data))
            assert state.resets == 0
            await ws.close()


N_BEHIND = 400
"""Deltas of ``BIG`` rows a resumed subscription missed: ~16 MB, more than the client's and the
gateway's socket buffers hold together, so the socket has data unsent while they are written."""


async def test_a_websocket_subscription_resumed_far_behind_gets_every_delta_it_missed(
    tight_gateway: ServedGateway, store: redis.Redis, writer: Writer
) -> None:
    """The deltas a resumed subscription missed are its first frames: all of them are written,
    however many more than the subscriber buffer (8 here) and however much the socket holds
    unsent meanwhile, as an SSE response's first body is. The slow-consumer rule applies to
    what comes after."""
    gw = tight_gateway
    writer.write([("likes", "behind", "row", {"i": -1})])

    async with asyncio.timeout(120):
        async with aiohttp.ClientSession() as s:
            ws = await s.ws_connect(gw.ws_url, params={"access_token": gw.token("alice")},
                                    max_msg_size=0)  # fmt: skip
            await ws.receive()
            subscribe = {"type": "subscribe", "sub": "b", "view": "likes", "key": "behind"}
            await ws.send_str(json.dumps(subscribe))
            first = json.loads((await ws.receive()).data)
            assert first["type"] == "snapshot"
            await ws.send_str(json.dumps({"type": "unsubscribe", "sub": "b"}))
            assert json.loads((await ws.receive()).data)["type"] == "unsubscribed"
            for i in range(N_BEHIND):
                writer.write([("likes", "behind", "row", {"i": i, "pad": BIG})])
            await ws.send_str(json.dumps({**subscribe, "last_event_id": first["id"]}))
            # Not reading for a moment: the missed deltas fill both socket buffers meanwhile.
            await asyncio.sleep(1.0)
            got: list[dict[str, Any]] = []
            while len(got) < N_BEHIND:
                m = json.loads((await asyncio.wait_for(ws.receive(), 30)).data)
                assert m["type"] in ("delta", "progress", "heartbeat"), m
                if m["type"] == "delta":
                    got.append(m)
            assert [m["data"]["ops"][0]["value"]["i"] for m in got] == list(range(N_BEHIND))
            await ws.close()


def first_cut(store: redis.Redis) -> dict[int, str]:
    """The heads of the first cut a group appended: with no event appended since, every batch
    written with this frontier ends exactly at each later cut too."""
    from liveviews.changes.cuts import CUTS_STREAM

    read = store.xrange(CUTS_STREAM, count=1)
    assert read, "the group appended no cut"
    return {int(k): v.decode() for k, v in read[0][1].items() if k != b"pipelines"}


def write_big_to_group(writer: Writer, gw: ServedGateway, heads: dict[int, str]) -> None:
    """Large deltas of ``likes/gslow`` and some of ``profiles/gslow``, two pipelines' views,
    each batch ending at the group's cuts."""
    capacity = gw.settings.subscriber_buffer
    for i in range(DELTAS):
        changes: list[tuple[str, str, str, Any]] = [("likes", "gslow", "row", {"i": i, "pad": BIG})]
        if i % 20 == 0:
            changes.append(("profiles", "gslow", "profile", {"name": f"n{i}"}))
        writer.write(changes, heads)
        assert max((len(s.buffer) for s in list(gw.gateway.hub.all)), default=0) <= capacity


async def test_a_slow_group_is_ended_with_its_group_id_and_resumes_without_a_gap(
    tight_gateway: ServedGateway, store: redis.Redis, writer: Writer
) -> None:
    """The slow-consumer rule for a group over SSE: its members' frames held past the buffer
    end the stream with ``slow_consumer`` and the last group id the client was sent, from which
    it resumes every member with no gap and no duplicate."""
    from tests.support.groups import apply_group_frame

    gw = tight_gateway
    metrics = gw.gateway.metrics
    before = metrics.slow_consumers
    url = gw.url + "/v1/groups/live?view=likes&key=gslow&view=profiles&key=gslow"
    rows: dict[str, dict[str, Any]] = {"m0": {}, "m1": {}}
    ids: dict[str, str] = {}
    seen: dict[str, list[str]] = {"m0": [], "m1": []}

    def apply(data: dict[str, Any]) -> None:
        for frame in data["frames"]:
            if frame["type"] == "delta":
                assert frame["id"] not in seen[frame["sub"]], f"duplicate delta {frame['id']}"
                if seen[frame["sub"]]:
                    assert position(frame["id"]) > position(seen[frame["sub"]][-1])
                seen[frame["sub"]].append(frame["id"])
        apply_group_frame(data, rows, ids)

    async with aiohttp.ClientSession() as s:
        sse = await open_sse(s, url, gw.headers())
        await wait_for(lambda: store.xlen("lv:{m}:cuts") > 0)
        heads = first_cut(store)
        writer.write([], heads)  # the pipelines reach the group's first cut
        first = await sse.next(timeout=30)
        assert first.event == "group"
        apply(first.data)
        last_id = first.id
        await asyncio.to_thread(write_big_to_group, writer, gw, heads)
        await wait_for(lambda: metrics.slow_consumers > before, timeout=30)
        while True:  # now read what was on its way, up to the end frame
            ev = await sse.next(timeout=30)
            if ev.event == "end":
                break
            assert ev.event == "group", ev
            apply(ev.data)
            last_id = ev.id
        assert ev.data["code"] == "slow_consumer"
        assert ev.data["last_event_id"] == last_id
        headers = {**gw.headers(), "Last-Event-ID": ev.data["last_event_id"]}
        sse = await open_sse(s, url, headers)
        target = {"m0": stored_rows(store, "likes", "gslow", 8),
                  "m1": stored_rows(store, "profiles", "gslow", 8)}  # fmt: skip
        while rows != target:
            ev = await sse.next(timeout=30)
            assert ev.event == "group", ev
            assert not any(f["type"] in ("snapshot", "reset") for f in ev.data["frames"])
            apply(ev.data)
        await sse.close()
