"""Publishing: accepted shapes, offsets, limits, and every rejection leaving the log untouched."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import redis

from demo.chirp import app as chirp
from liveviews.errors import ConfigurationError
from liveviews.gateway.settings import GatewaySettings
from liveviews.log.events import decode_entry, log_stream
from liveviews.store.diskguard import REASON_KEPT_S, REFUSAL_KEY, DiskGuard
from liveviews.store.embedded import EmbeddedStore, free_port
from tests.support.disk import fill as fill_disk
from tests.support.disk import small_filesystem
from tests.support.gateway import ServedGateway, Writer, open_sse
from tests.support.gateway_settings import settings_for

PROFILE = {"type": "profile_set", "payload": {"user": "alice", "name": "Alice"}}
TWEET = {"type": "tweet_posted", "payload": {"user": "alice", "tweet": "alice:1", "text": "hi"}}


def log_length(store: redis.Redis) -> int:
    return sum(store.xlen(log_stream(p)) for p in range(4))


async def post(gw: ServedGateway, body: Any, raw: bytes | None = None, user: str = "alice",
               headers: dict[str, str] | None = None) -> tuple[int, Any]:  # fmt: skip
    async with aiohttp.ClientSession() as s:
        h = headers if headers is not None else gw.headers(user)
        if raw is not None:
            resp = await s.post(gw.url + "/v1/events", data=raw,
                                headers={**h, "Content-Type": "application/json"})  # fmt: skip
        else:
            resp = await s.post(gw.url + "/v1/events", json=body, headers=h)
        return resp.status, await resp.json(content_type=None)


@pytest.mark.parametrize("shape", ["object", "array", "events"])
async def test_accepted_shapes_answer_offsets_of_appended_events(
    gateway: ServedGateway, store: redis.Redis, shape: str
) -> None:
    batch = [PROFILE, TWEET]
    body = {"object": PROFILE, "array": batch, "events": {"events": batch}}[shape]
    status, answer = await post(gateway, body)
    assert status == 202
    offsets = answer["offsets"]
    assert len(offsets) == (1 if shape == "object" else 2)
    for off, sent in zip(offsets, batch, strict=False):
        assert off["token"] == f"{off['partition']}:{off['id']}"
        entries = store.xrange(log_stream(off["partition"]), off["id"], off["id"])
        logged = decode_entry(off["partition"], *entries[0])
        assert logged.type == sent["type"] and logged.payload == sent["payload"]


BAD: list[tuple[str, Any, bytes | None, int, str]] = [
    ("malformed json", None, b'{"type": ', 400, "malformed_json"),
    ("not an object", None, b'"hello"', 422, "wrong_type"),
    ("empty batch", [], None, 422, "empty_batch"),
    ("events not array", {"events": 3}, None, 422, "wrong_type"),
    ("unknown type", {"type": "nope", "payload": {}}, None, 422, "unknown_event_type"),
    ("wrong field type", {"type": "profile_set", "payload": {"user": "alice", "name": 5}},
     None, 422, "wrong_type"),
    ("extra field", {**PROFILE, "x": 1}, None, 422, "unexpected_field"),
    ("bad time", {**PROFILE, "time": "yesterday"}, None, 422, "invalid_time"),
    ("second of batch invalid", [PROFILE, {"type": "like", "payload": {}}], None, 422,
     "missing_field"),
    ("too many events", [PROFILE] * 51, None, 413, "too_many_events"),
    ("body too large", None, b"[" + b" " * 70_000 + b"]", 413, "body_too_large"),
    ("as someone else", [PROFILE, {"type": "profile_set",
                                   "payload": {"user": "bob", "name": "Bob"}}],
     None, 403, "not_author"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "body", "raw", "status", "code"), BAD, ids=[b[0] for b in BAD])
async def test_rejections_answer_their_code_and_write_nothing(
    gateway: ServedGateway, store: redis.Redis, name: str, body: Any, raw: bytes | None,
    status: int, code: str,
) -> None:  # fmt: skip
    got, answer = await post(gateway, body, raw)
    assert (got, answer["code"]) == (status, code), answer
    assert isinstance(answer["message"], str) and answer["message"]
    assert log_length(store) == 0


async def test_a_rejected_event_of_a_batch_is_named_by_index(gateway: ServedGateway) -> None:
    status, answer = await post(gateway, [PROFILE, PROFILE, {"type": "like", "payload": {}}])
    assert status == 422 and answer["index"] == 2


async def test_publishing_needs_the_publish_scope(
    gateway: ServedGateway, store: redis.Redis
) -> None:
    status, answer = await post(gateway, PROFILE, headers=gateway.headers("alice", scope="read"))
    assert (status, answer["code"]) == (403, "insufficient_scope")
    assert log_length(store) == 0


async def test_an_oversize_declared_length_is_refused_before_reading(
    gateway: ServedGateway,
) -> None:
    async with aiohttp.ClientSession() as s:

        async def body() -> Any:
            yield b"[" + b" " * 40_000
            yield b" " * 40_000 + b"]"

        resp = await s.post(
            gateway.url + "/v1/events",
            data=body(),
            headers={**gateway.headers(), "Content-Type": "application/json"},
        )
        status, answer = resp.status, await resp.json()
    assert (status, answer["code"]) == (413, "body_too_large")


# Publishing within bounds: event times near the clock, a rate per subject, a store with room
# and a log kept as long as LV_LOG_RETENTION says, over HTTP and over WebSocket alike.

DAY_MS = 86_400_000


def now_ms() -> int:
    return int(time.time() * 1000)


async def ws_publish(gw: ServedGateway, events: list[Any], user: str = "alice") -> Any:
    """The answer to one WebSocket ``publish`` of ``events`` as ``user``."""
    async with (
        aiohttp.ClientSession() as s,
        s.ws_connect(gw.ws_url, params={"access_token": gw.token(user)}) as ws,
    ):
        assert (await ws.receive_json(timeout=10))["type"] == "authenticated"
        await ws.send_json({"type": "publish", "req": "r", "events": events})
        while True:
            answer = await ws.receive_json(timeout=10)
            if answer["type"] not in ("heartbeat", "progress"):
                return answer


def profiles(user: str, n: int) -> list[dict[str, Any]]:
    return [{"type": "profile_set", "payload": {"user": user, "name": f"{user} {i}"}}
            for i in range(n)]  # fmt: skip


FAR_TIMES = [
    ("the year 9999", "9999-12-31T23:59:59Z"),
    ("two days ahead", lambda: now_ms() + 2 * DAY_MS),
    ("eleven years back", lambda: now_ms() - 11 * 365 * DAY_MS),
]


@pytest.mark.parametrize(("name", "time_"), FAR_TIMES, ids=[t[0] for t in FAR_TIMES])
async def test_an_event_time_far_from_the_clock_is_refused(
    gateway: ServedGateway, store: redis.Redis, name: str, time_: Any
) -> None:
    """It was taken: a tweet dated 9999 topped every follower's timeline for good, and marked
    every later event of its partition late. Refused over HTTP and WebSocket, saying the
    window."""
    event = {**TWEET, "time": time_() if callable(time_) else time_}
    status, answer = await post(gateway, [PROFILE, event])
    assert (status, answer["code"]) == (422, "time_out_of_range"), answer
    assert (answer["index"], answer["field"]) == (1, "time")
    assert "1 day after" in answer["message"] and "3650 days before" in answer["message"]
    refused = await ws_publish(gateway, [PROFILE, event])
    assert (refused["type"], refused["code"], refused["index"]) == ("error", "time_out_of_range", 1)
    assert log_length(store) == 0


async def test_event_times_within_the_window_are_taken(
    gateway: ServedGateway, store: redis.Redis
) -> None:
    times = [now_ms() + 3_600_000, now_ms() - 5 * 365 * DAY_MS, None]
    events = [{**TWEET, **({"time": t} if t else {})} for t in times]
    status, answer = await post(gateway, events)
    assert status == 202, answer
    assert log_length(store) == 3


@pytest.fixture()
def rated(store_url: str) -> Iterator[ServedGateway]:
    """One event per second per subject, 50 at once (a full batch)."""
    served = ServedGateway(settings_for(store_url, LV_PUBLISH_RATE="1", LV_PUBLISH_BURST="50"))
    yield served.start()
    served.stop()


async def test_a_subject_over_its_rate_is_refused_until_retry_after(
    rated: ServedGateway, store: redis.Redis
) -> None:
    """Publishing had no rate: one subject could append as fast as the store took it."""
    assert (await post(rated, profiles("alice", 30)))[0] == 202
    async with aiohttp.ClientSession() as s:
        resp = await s.post(rated.url + "/v1/events", json=profiles("alice", 30),
                            headers=rated.headers("alice"))  # fmt: skip
        answer = await resp.json()
    # A batch counts its events: 30 more than the 20 or so left are refused, all of them.
    assert (resp.status, answer["code"]) == (429, "rate_limited"), answer
    assert 9 <= answer["retry_after"] <= 10
    assert resp.headers["Retry-After"] == str(answer["retry_after"])
    assert log_length(store) == 30
    # The refused batch took nothing: what was left is still there, and others have their own.
    assert (await post(rated, profiles("alice", 19)))[0] == 202
    assert (await post(rated, profiles("bob", 50), user="bob"))[0] == 202
    status, answer = await post(rated, profiles("alice", 2))
    assert (status, answer["code"], answer["retry_after"]) == (429, "rate_limited", 1)
    await asyncio.sleep(1.1)
    assert (await post(rated, profiles("alice", 1)))[0] == 202
    assert log_length(store) == 30 + 19 + 50 + 1


async def test_a_subject_over_its_rate_is_refused_over_websocket(
    rated: ServedGateway, store: redis.Redis
) -> None:
    assert (await ws_publish(rated, profiles("carol", 50), "carol"))["type"] == "published"
    refused = await ws_publish(rated, profiles("carol", 5), "carol")
    assert (refused["type"], refused["req"], refused["code"]) == ("error", "r", "rate_limited")
    assert 1 <= refused["retry_after"] <= 5
    assert log_length(store) == 50


@pytest.fixture()
def small_store(tmp_path: Path) -> Iterator[redis.Redis]:
    """A store of the test's own, which the test fills: at its maxmemory it refuses writes."""
    with EmbeddedStore(tmp_path, free_port()) as url:
        client = redis.Redis.from_url(url)
        client.config_set("maxmemory-policy", "noeviction")
        yield client
        client.close()


def store_url_of(client: redis.Redis) -> str:
    kw = client.connection_pool.connection_kwargs
    password = f":{kw['password']}@" if kw.get("password") else ""
    return f"redis://{password}{kw['host']}:{kw['port']}/0"


def fill(client: redis.Redis, to: int) -> None:
    """Values of 256 kB until the store uses ``to`` bytes (one large value would be refused:
    its own request counts)."""
    for i in range(10_000):
        if int(client.info("memory")["used_memory"]) >= to:
            return
        client.set(f"filler:{i}", b"x" * 262_144)


async def test_publishing_stops_before_the_store_is_full(small_store: redis.Redis) -> None:
    """A store without maxmemory took events until the machine ran out of memory; one at its
    maxmemory refuses every write, the pipeline's too. The gateway now refuses publishes first,
    above LV_STORE_FULL_PERCENT of maxmemory, and takes them again once there is room."""
    settings = settings_for(store_url_of(small_store), LV_STORE_FULL_PERCENT="80",
                            LV_STORE_MEMORY_CHECK_MS="10")  # fmt: skip
    served = ServedGateway(settings).start()
    try:
        used = int(small_store.info("memory")["used_memory"])
        limit = used + 16 * 1_048_576
        small_store.config_set("maxmemory", limit)
        assert (await post(served, PROFILE))[0] == 202
        fill(small_store, limit * 9 // 10)  # 90%: room left, but not for publishing
        await asyncio.sleep(0.05)
        status, answer = await post(served, [PROFILE, TWEET])
        assert (status, answer["code"]) == (503, "store_full"), answer
        assert "maxmemory" in answer["message"]
        refused = await ws_publish(served, [PROFILE])
        assert (refused["type"], refused["code"]) == ("error", "store_full")
        assert log_length(small_store) == 1
        small_store.delete(*small_store.keys("filler:*"))
        await asyncio.sleep(0.05)
        assert (await post(served, PROFILE))[0] == 202
    finally:
        served.stop()


async def test_the_stores_own_refusal_answers_store_full(small_store: redis.Redis) -> None:
    """A store refusing a write for memory (OOM) answered 503 store_unavailable, as if it were
    down; it is store_full now, over HTTP and WebSocket, and nothing of the batch is written."""
    # The gateway reads the store's memory once an hour here: the store refuses first.
    settings = settings_for(store_url_of(small_store), LV_STORE_MEMORY_CHECK_MS="3600000")
    served = ServedGateway(settings).start()
    try:
        assert (await post(served, PROFILE))[0] == 202
        small_store.config_set("maxmemory", 1)
        status, answer = await post(served, [PROFILE, TWEET])
        assert (status, answer["code"]) == (503, "store_full"), answer
        refused = await ws_publish(served, [PROFILE])
        assert (refused["type"], refused["code"]) == ("error", "store_full")
        assert log_length(small_store) == 1
    finally:
        served.stop()


async def test_a_full_store_still_serves_reads_and_subscriptions(small_store: redis.Redis) -> None:
    """Every read of a snapshot or history began with HSETNX of the store's layout record, a
    write: a store at its maxmemory refused the whole transaction, and the gateway answered
    reads 503 while it only needed to read. The record is now written only when it is missing."""
    settings = settings_for(store_url_of(small_store), LV_STORE_MEMORY_CHECK_MS="3600000",
                            LV_CHANGE_SHARDS="8")  # fmt: skip
    served = ServedGateway(settings).start()
    try:
        Writer(small_store, chirp, 8).write([("profiles", "alice", "profile", {"name": "A"})])
        small_store.config_set("maxmemory", 1)
        with pytest.raises(redis.exceptions.OutOfMemoryError):
            small_store.set("probe", "x")  # the store refuses writes now
        async with aiohttp.ClientSession() as s:
            got = await s.get(served.url + "/v1/views/profiles/alice", headers=served.headers())
            assert got.status == 200, await got.text()
            assert (await got.json())["rows"] == {"profile": {"name": "A"}}
            sse = await open_sse(s, served.url + "/v1/views/profiles/alice/live", served.headers())
            snapshot = await sse.next()
            assert snapshot.event == "snapshot" and snapshot.data["rows"] == {
                "profile": {"name": "A"}
            }
            resumed = await open_sse(s, served.url + "/v1/views/profiles/alice/live",
                                     {**served.headers(), "Last-Event-ID": snapshot.id or ""})  # fmt: skip
            await resumed.heartbeat(timeout=3)  # resumed from history, nothing missed
            await sse.close()
            await resumed.close()
    finally:
        small_store.config_set("maxmemory", 0)
        served.stop()


@pytest.fixture()
def small_disk(tmp_path: Path) -> Iterator[Path]:
    with small_filesystem(tmp_path / "disk", 48) as disk:
        yield disk


async def test_a_store_short_of_disk_refuses_writes_and_keeps_serving_reads(
    small_disk: Path,
) -> None:
    """Under appendfsync always a store that cannot write its append-only file exits, which
    took every reader down with it on a full disk. The embedded store now stops taking writes
    below its disk reserve (a publish answers 503 store_disk_full, saying why), keeps serving
    reads, and takes writes again once there is room."""
    reserve = 16 * 1_048_576
    with EmbeddedStore(small_disk, free_port(), disk_reserve=reserve) as url:
        client = redis.Redis.from_url(url)
        served = ServedGateway(settings_for(url, LV_CHANGE_SHARDS="8")).start()
        try:
            Writer(client, chirp, 8).write([("profiles", "alice", "profile", {"name": "A"})])
            assert (await post(served, PROFILE))[0] == 202
            filler = fill_disk(small_disk, leave=reserve // 2)
            deadline = time.monotonic() + 5
            while True:
                status, answer = await post(served, PROFILE)
                if status != 202 or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.1)
            assert (status, answer["code"]) == (503, "store_disk_full"), answer
            assert "LV_STORE_DISK_RESERVE" in answer["message"]
            refused = await ws_publish(served, [PROFILE])
            assert (refused["type"], refused["code"]) == ("error", "store_disk_full")
            async with aiohttp.ClientSession() as s:
                got = await s.get(served.url + "/v1/views/profiles/alice", headers=served.headers())
                assert got.status == 200 and (await got.json())["rows"] == {
                    "profile": {"name": "A"}
                }
            acknowledged = log_length(client)
            filler.unlink()
            deadline = time.monotonic() + 5
            while (await post(served, PROFILE))[0] != 202:
                assert time.monotonic() < deadline, "writes were not taken again"
                await asyncio.sleep(0.1)
            assert log_length(client) == acknowledged + 1  # the refused ones were not written
        finally:
            served.stop()
            client.close()


def test_the_guard_switches_with_a_margin(store_url: str, store: redis.Redis) -> None:
    """Off below the reserve, on again only above one and a half reserves: no flapping at the
    edge. A refused store refuses every write and still answers reads."""
    guard = DiskGuard(store_url, Path("/"), reserve=100)
    try:
        guard.check(store, 99)
        assert guard.refusing
        with pytest.raises(redis.exceptions.ResponseError, match="NOREPLICAS"):
            store.set("probe", "x")
        assert store.get(REFUSAL_KEY) is not None
        guard.check(store, 149)
        assert guard.refusing
        guard.check(store, 150)
        assert not guard.refusing
        store.set("probe", "x")
        # A write refused just before the switch still reads why, for a while only.
        assert store.get(REFUSAL_KEY) is not None
        assert 0 < store.ttl(REFUSAL_KEY) <= REASON_KEPT_S
    finally:
        store.config_set("min-replicas-to-write", 0)
        store.delete(REFUSAL_KEY)


async def test_the_log_keeps_what_lv_log_retention_says(store_url: str, store: redis.Redis) -> None:
    """Log streams grew without bound; with LV_LOG_RETENTION=N each append trims its
    partition to about its newest N events (whole nodes of 100: never fewer than N)."""
    served = ServedGateway(settings_for(store_url, LV_LOG_RETENTION="100")).start()
    try:
        for _ in range(6):
            assert (await post(served, profiles("alice", 50)))[0] == 202
    finally:
        served.stop()
    assert 100 <= log_length(store) <= 200


def test_publishing_limits_have_defaults_and_can_be_lifted() -> None:
    given = GatewaySettings.from_env({})
    assert (given.publish_rate, given.publish_burst) == (100.0, 1000)
    assert (given.event_time_max_ahead_seconds, given.event_time_max_age_days) == (86_400, 3650)
    assert (given.store_full_percent, given.store_memory_check_ms) == (90, 500)
    assert GatewaySettings.from_env({"LV_PUBLISH_RATE": "off"}).publish_rate == 0
    assert GatewaySettings.from_env({"LV_PUBLISH_RATE": "0.5"}).publish_rate == 0.5


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({"LV_PUBLISH_RATE": "fast"}, "LV_PUBLISH_RATE must be a number of events per second"),
        ({"LV_PUBLISH_RATE": "-1"}, "LV_PUBLISH_RATE must be 0 (no limit) or more"),
        ({"LV_PUBLISH_RATE": "nan"}, "LV_PUBLISH_RATE must be 0 (no limit) or more"),
        ({"LV_PUBLISH_BURST": "10"}, "LV_PUBLISH_BURST (10) must be at least LV_MAX_BATCH_EVENTS"),
        ({"LV_STORE_FULL_PERCENT": "0"}, "LV_STORE_FULL_PERCENT must be at least 1"),
        ({"LV_STORE_FULL_PERCENT": "101"}, "LV_STORE_FULL_PERCENT must be from 1 to 100"),
        ({"LV_EVENT_TIME_MAX_AGE_DAYS": "soon"}, "LV_EVENT_TIME_MAX_AGE_DAYS must be a whole"),
    ],
)
def test_publishing_limits_that_cannot_work_are_refused(env: dict[str, str], says: str) -> None:
    with pytest.raises(ConfigurationError) as refused:
        GatewaySettings.from_env(env)
    assert says in refused.value.message
