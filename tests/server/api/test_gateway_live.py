"""The SSE endpoint: snapshot, deltas, progress, heartbeats, resume and reset."""

from __future__ import annotations

import asyncio
import contextlib
import time

import aiohttp
import pytest
import redis

from demo.chirp import app as chirp
from liveviews.changes.topic import VIEWS_FRONTIER, read_frontier, shard_for
from tests.support.gateway import (
    ServedGateway,
    State,
    Writer,
    free_port,
    open_sse,
    stored_rows,
)
from tests.support.gateway_settings import settings_for

LIVE = "/v1/views/profiles/alice/live"


def profile(name: str) -> dict[str, str]:
    return {"user": "alice", "name": name}


def same_shard_keys(view: str, key: str, n: int) -> list[str]:
    shard = shard_for(view, key, 8)
    out, i = [], 0
    while len(out) < n:
        candidate = f"u{i}"
        if candidate != key and shard_for(view, candidate, 8) == shard:
            out.append(candidate)
        i += 1
    return out


async def test_snapshot_then_deltas_then_progress(
    gateway: ServedGateway, store: redis.Redis, writer: Writer
) -> None:
    writer.write([("profiles", "alice", "profile", profile("A0"))])

    async with aiohttp.ClientSession() as s:
        sse = await open_sse(s, gateway.url + LIVE, gateway.headers())
        snap = await sse.next()
        assert snap.event == "snapshot"
        assert snap.data["rows"] == {"profile": profile("A0")}
        writer.write([("profiles", "alice", "profile", profile("A1")),
                      ("profiles", "bob", "profile", {"name": "B"})], {0: "5-0"})  # fmt: skip
        delta = await sse.next()
        assert delta.event == "delta" and delta.data["key"] == "alice"
        assert delta.data["ops"] == [{"op": "upsert", "row": "profile", "value": profile("A1")}]
        assert delta.id is not None and delta.id.split(".")[0] == snap.id.split(".")[0]  # type: ignore[union-attr]
        progress = await sse.next()
        assert progress.event == "progress" and progress.id is None
        assert progress.data == {"frontier": {"0": "5-0"}, "lag_ms": 0}  # no log: nothing behind
        writer.write([("profiles", "bob", "profile", {"name": "B2"})], {1: "7-0"})
        progress = await sse.next()  # this key did not change, the frontier did
        assert progress.data == {"frontier": {"0": "5-0", "1": "7-0"}, "lag_ms": 0}
        await sse.heartbeat(timeout=3)  # the gateway under test beats every second
        await sse.close()


async def test_a_view_follows_the_frontier_of_the_pipeline_that_writes_it(
    gateway: ServedGateway, store: redis.Redis, writer: Writer
) -> None:
    """Chirp's activity pipeline runs its micro-batches seconds apart; the profiles view
    reflects the log as far as the profiles pipeline has read it, not as far as the slower
    pipeline has."""
    profiles_sink, activity = writer.sinks["profiles"], writer.sinks["activity"]

    async with aiohttp.ClientSession(headers=gateway.headers()) as s:
        profiles = await open_sse(s, gateway.url + LIVE)
        counts = await open_sse(s, gateway.url + "/v1/views/activity/global/live")
        assert (await profiles.next()).data["frontier"] == {}
        assert (await counts.next()).data["frontier"] == {}
        profiles_sink.write([], next(writer.batches), {0: "5-0"})
        assert (await profiles.next()).data == {"frontier": {"0": "5-0"}, "lag_ms": 0}
        assert read_frontier(store, VIEWS_FRONTIER) == {}  # activity has read nothing yet
        snapshot = await (await s.get(gateway.url + "/v1/views/profiles/alice")).json()
        assert snapshot["frontier"] == {"0": "5-0"}
        activity.write([], next(writer.batches), {0: "3-0"})
        # The activity view's subscriber gets its own pipeline's frontier, and only that.
        assert (await counts.next()).data == {"frontier": {"0": "3-0"}, "lag_ms": 0}
        profiles_sink.write([], next(writer.batches), {0: "6-0"})
        assert (await profiles.next()).data == {"frontier": {"0": "6-0"}, "lag_ms": 0}
        await profiles.close()
        await counts.close()


async def test_resume_sends_exactly_the_missed_deltas(
    gateway: ServedGateway, store: redis.Redis, writer: Writer
) -> None:
    async with aiohttp.ClientSession() as s:
        state = State()
        sse = await open_sse(s, gateway.url + LIVE, gateway.headers())
        state.apply(await sse.next())
        writer.write([("profiles", "alice", "profile", profile("A1"))])
        state.apply(await sse.next())
        await sse.close()
        for i in range(2, 6):
            writer.write([("profiles", "alice", "profile", profile(f"A{i}")),
                          ("profiles", "bob", "profile", {"name": f"B{i}"})])  # fmt: skip
        # The header wins over the query parameter, which here names an older position.
        headers = {**gateway.headers(), "Last-Event-ID": state.last_id or ""}
        older = state.ids[0].split(".")[0] + ".0-0"
        sse = await open_sse(s, gateway.url + LIVE, headers, params={"last_event_id": older})
        for _ in range(4):
            ev = await sse.next()
            assert ev.event == "delta"
            state.apply(ev)
        writer.write([("profiles", "alice", "profile", profile("A6"))])
        state.apply(await sse.next())
        assert state.rows == stored_rows(store, "profiles", "alice", 8)
        assert state.rows["profile"]["name"] == "A6" and state.resets == 0
        await sse.close()
        # The query parameter alone, as an EventSource polyfill would send it.
        sse = await open_sse(s, gateway.url + LIVE, gateway.headers(),
                             params={"last_event_id": state.last_id or ""})  # fmt: skip
        writer.write([("profiles", "alice", "profile", profile("A7"))])
        ev = await sse.next()
        assert ev.event == "delta" and ev.data["ops"][0]["value"]["name"] == "A7"
        await sse.close()


async def test_resume_beyond_retention_resets_with_a_fresh_snapshot(
    gateway: ServedGateway, store: redis.Redis
) -> None:
    small = Writer(store, chirp, 8, retention=10)
    others = same_shard_keys("profiles", "alice", 5)

    async with aiohttp.ClientSession() as s:
        sse = await open_sse(s, gateway.url + LIVE, gateway.headers())
        first = await sse.next()
        await sse.close()
        for i in range(300):
            small.write([("profiles", others[i % 5], "profile", {"name": f"x{i}"})]
                        + ([("profiles", "alice", "profile", profile(f"A{i}"))]
                           if i % 50 == 0 else []))  # fmt: skip
        headers = {**gateway.headers(), "Last-Event-ID": first.id or ""}
        sse = await open_sse(s, gateway.url + LIVE, headers)
        reset = await sse.next()
        assert reset.event == "reset" and reset.data["code"] == "history_trimmed"
        snap = await sse.next()
        assert snap.event == "snapshot"
        assert snap.data["rows"] == stored_rows(store, "profiles", "alice", 8)
        small.write([("profiles", "alice", "profile", profile("after"))])
        ev = await sse.next()
        assert ev.event == "delta" and ev.data["ops"][0]["value"]["name"] == "after"
        await sse.close()


async def test_a_wiped_store_resets_open_streams_and_old_ids(
    gateway: ServedGateway, store: redis.Redis, writer: Writer
) -> None:
    writer.write([("profiles", "alice", "profile", profile("old"))])

    async with aiohttp.ClientSession() as s:
        sse = await open_sse(s, gateway.url + LIVE, gateway.headers())
        snap = await sse.next()
        assert snap.data["rows"]["profile"]["name"] == "old"
        store.flushdb()
        fresh = Writer(store, chirp, 8)
        fresh.write([("profiles", "alice", "profile", profile("new"))])
        reset = await sse.next()
        assert reset.event == "reset" and reset.data["code"] == "epoch_changed"
        snap2 = await sse.next()
        assert snap2.event == "snapshot" and snap2.id.split(".")[0] != snap.id.split(".")[0]  # type: ignore[union-attr]
        state = State()
        state.apply(snap2)
        fresh.write([("profiles", "alice", "profile", profile("newer"))])
        while state.rows.get("profile", {}).get("name") != "newer":
            state.apply(await sse.next())
        await sse.close()
        headers = {**gateway.headers(), "Last-Event-ID": snap.id or ""}
        sse = await open_sse(s, gateway.url + LIVE, headers)
        reset = await sse.next()
        assert (reset.event, reset.data["code"]) == ("reset", "epoch_changed")
        snap3 = await sse.next()
        assert snap3.data["rows"]["profile"]["name"] == "newer"
        await sse.close()


async def test_bad_requests_to_live_get_their_codes(
    gateway: ServedGateway, store: redis.Redis
) -> None:
    async with aiohttp.ClientSession() as s:
        cases = [
            (LIVE, {"Last-Event-ID": "garbage"}, 400, "invalid_last_event_id"),
            (LIVE + "?last_event_id=1-0", {}, 400, "invalid_last_event_id"),
            ("/v1/views/nope/alice/live", {}, 404, "unknown_view"),
            ("/v1/views/timeline/bob/live", {}, 403, "forbidden"),
        ]
        for path, extra, status, code in cases:
            resp = await s.get(gateway.url + path, headers={**gateway.headers(), **extra})
            body = await resp.json()
            assert (resp.status, body["code"]) == (status, code), path
        resp = await s.head(gateway.url + LIVE, headers=gateway.headers())
        assert resp.status == 200
        assert gateway.gateway.metrics.subscriptions == 0


async def test_an_idle_stream_holds_no_task_and_no_http_protocol(
    gateway: ServedGateway, writer: Writer
) -> None:
    """An open stream costs no task and none of uvicorn's per-connection state: once its first
    frames are out, the stream owns its connection (``liveviews.gateway._uvicorn.http``), the request's task ends,
    and the connection's disconnect is noticed by the stream itself."""

    async with aiohttp.ClientSession(headers=gateway.headers()) as s:
        before = len(gateway.awaited_files())
        streams = [await open_sse(s, gateway.url + f"/v1/views/profiles/idle{i}/live")
                   for i in range(10)]  # fmt: skip
        for stream in streams:
            assert (await stream.next()).event == "snapshot"
        during = gateway.awaited_files()
        # At most the two tasks the SSE ticker starts with the first stream.
        assert len(during) - before <= 2, during
        assert not [t for t in during if any(f.endswith("server/api/streams.py") for f in t)]
        kinds = gateway.connection_kinds()
        assert kinds.count("ReleasedConnection") == 10, kinds
        # Still live: a delta reaches every stream, straight from the hub.
        writer.write([("profiles", f"idle{i}", "name", {"v": i}) for i in range(10)])
        for i, stream in enumerate(streams):
            ev = await stream.next(skip=("progress",))
            assert ev.event == "delta" and ev.data["key"] == f"idle{i}", ev
        for stream in streams:
            await stream.close()
        deadline = time.monotonic() + 5
        while gateway.gateway.metrics.subscriptions and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        assert gateway.gateway.metrics.subscriptions == 0
        assert "ReleasedConnection" not in gateway.connection_kinds()


async def raw_stream(
    gateway: ServedGateway, key: str, behind: bytes = b""
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, bytes]:
    """A stream of profiles/``key`` opened on a plain socket (``behind``: bytes sent right after
    the request, in the same write), read up to its snapshot; and what was read."""
    host, port = gateway.url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    auth = gateway.headers()["Authorization"]
    writer.write(f"GET /v1/views/profiles/{key}/live HTTP/1.1\r\nHost: x\r\n"
                 f"Authorization: {auth}\r\n\r\n".encode() + behind)  # fmt: skip
    seen = b""
    async with asyncio.timeout(10):
        while b"event: snapshot" not in seen:
            seen += await reader.read(65536)
    assert seen.startswith(b"HTTP/1.1 200"), seen[:200]
    return reader, writer, seen


async def test_a_stream_with_a_request_pipelined_behind_it_is_still_served(
    gateway: ServedGateway, writer: Writer
) -> None:
    """A request sent behind the stream's, on the same connection, keeps the connection with
    the HTTP protocol (it cannot be answered before the stream ends); the stream goes on
    through ASGI and its deltas still arrive."""
    writer.write([("profiles", "piped", "profile", profile("P0"))])

    reader, w, seen = await raw_stream(
        gateway, "piped", b"GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n"
    )
    async with asyncio.timeout(10):
        kinds = gateway.connection_kinds()
        assert "ReleasedConnection" not in kinds, kinds
        writer.write([("profiles", "piped", "profile", profile("P1"))])
        while b'"P1"' not in seen:
            seen += await reader.read(65536)
    w.close()


async def test_a_reset_that_cannot_read_the_store_closes_the_stream(
    store: redis.Redis, store_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """An idle stream woken by a new store epoch reads its fresh snapshot in a task of its own.
    If the store cannot be read then, the connection is closed before the reset frame is
    written: the client sees the stream cut, and resumes after its backoff from its last event
    id. The subscription and the connection are freed."""
    served = ServedGateway(settings_for(store_url)).start()
    loop = served.server.servers[0].get_loop()
    try:
        Writer(store, chirp, 8).write([("profiles", "rx", "profile", profile("R0"))])

        async def break_reads() -> None:
            # Snapshot reads go through the gateway's client; the change feed has its own.
            pool = served.gateway.client.connection_pool
            pool.connection_kwargs["port"] = free_port()  # nothing listens there
            await pool.disconnect()
            pool.reset()  # its connections remember the old address

        async with aiohttp.ClientSession() as s:
            sse = await open_sse(s, served.url + "/v1/views/profiles/rx/live",
                                 served.headers())  # fmt: skip
            assert (await sse.next()).data["rows"]["profile"]["name"] == "R0"
            await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(break_reads(), loop))
            store.flushdb()
            Writer(store, chirp, 8).write([("profiles", "rx", "profile", profile("R1"))])
            try:
                ev = await sse.next(timeout=10, skip=("progress",))
                raise AssertionError(f"a frame after the store was replaced: {ev}")
            except aiohttp.ClientPayloadError:
                pass  # cut short, no last chunk: the client retries with its backoff
            deadline = time.monotonic() + 5
            while served.gateway.metrics.subscriptions and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            assert served.gateway.metrics.subscriptions == 0
            kinds = served.connection_kinds()
            assert "ReleasedConnection" not in kinds, kinds
    finally:
        served.stop()
    # Said once, by the stream, in the gateway's log; not left to asyncio as an unread error.
    said = [r for r in caplog.records if r.name == "liveviews.gateway.sse"]
    assert [r.getMessage() for r in said] == ["SSE stream of profiles/rx closed on an error"], said


async def test_a_client_that_keeps_sending_on_its_stream_is_cut_off(gateway: ServedGateway) -> None:
    """A client has nothing to send on an open stream; what it sends is dropped, and one that
    sends more than a request's worth is cut off, which frees its subscription."""

    async with asyncio.timeout(5):  # streams of earlier tests are gone
        while gateway.gateway.metrics.subscriptions:
            await asyncio.sleep(0.02)
    _, w, _ = await raw_stream(gateway, "chatty")
    async with asyncio.timeout(10):
        w.write(b"x" * 1000)  # dropped: the stream goes on
        await w.drain()
        await asyncio.sleep(0.2)
        assert gateway.gateway.metrics.subscriptions == 1
        with contextlib.suppress(ConnectionError):
            for _ in range(100):
                w.write(b"x" * 4096)
                await w.drain()
                await asyncio.sleep(0.001)
        while gateway.gateway.metrics.subscriptions:
            await asyncio.sleep(0.02)
    w.close()
