"""Publishing once per Idempotency-Key on a single store server: a batch sent again with its key
gets the same offsets and appends nothing, over HTTP or a WebSocket; the key sent with other
events is refused and writes nothing in any partition; a key that is not one is refused."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import redis

from liveviews.log.append import RECORD_SECONDS, record_key
from liveviews.log.events import log_stream
from tests.support.gateway import ServedGateway
from tests.support.gateway_settings import PARTITIONS

GOLDEN = Path(__file__).resolve().parents[3] / "protocol" / "golden"


def profiles(users: list[str]) -> list[dict[str, Any]]:
    return [{"type": "profile_set", "payload": {"user": u, "name": u.upper()}} for u in users]


def log_length(store: redis.Redis) -> int:
    return sum(store.xlen(log_stream(p)) for p in range(PARTITIONS))


async def post(gw: ServedGateway, user: str, events: Any, headers: Any = ()) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as s:
        h = [*gw.headers(user).items(), *headers]
        async with s.post(gw.url + "/v1/events", json=events, headers=h) as resp:
            return resp.status, await resp.json()


async def test_a_batch_sent_again_with_its_key_is_appended_once(
    gateway: ServedGateway, store: redis.Redis
) -> None:
    events = profiles(["ann"]) * 3
    first = await post(gateway, "ann", events, [("Idempotency-Key", "k-1")])
    again = await post(gateway, "ann", events, [("Idempotency-Key", "k-1")])
    assert first[0] == again[0] == 202
    assert first[1] == again[1]
    assert log_length(store) == 3
    partition = first[1]["offsets"][0]["partition"]
    assert 0 < store.ttl(record_key(partition, "k-1")) <= RECORD_SECONDS
    keyless = await post(gateway, "ann", events)
    assert keyless[0] == 202 and keyless[1] != first[1]
    assert log_length(store) == 6
    # Its one transaction is never retried: a batch without a key keeps no record here.
    assert [k for k in store.scan_iter(match="{lv:log:*}:appended:*") if b"k-1" not in k] == []


async def test_a_gateway_keeps_a_key_for_its_idempotency_seconds(
    tight_gateway: ServedGateway, store: redis.Redis
) -> None:
    """``LV_IDEMPOTENCY_SECONDS`` (600 on this gateway) is how long the record is kept."""
    events = profiles(["ann"])
    status, body = await post(tight_gateway, "ann", events, [("Idempotency-Key", "k-short")])
    assert status == 202
    assert 500 < store.ttl(record_key(body["offsets"][0]["partition"], "k-short")) <= 600


async def test_a_websocket_publish_sent_again_with_its_key_is_appended_once(
    gateway: ServedGateway, store: redis.Redis
) -> None:
    """The golden message sent twice, the second time on another socket (as after a lost
    answer and a reconnect), is answered with the same offsets; other events under the same
    key are refused, and the log holds the event once."""
    text = json.loads((GOLDEN / "client-publish-once.json").read_text())["ws"]["text"]
    other = json.loads(text) | {
        "events": [{"type": "profile_set", "payload": {"user": "alice", "name": "Other"}}]
    }
    answers = []
    async with aiohttp.ClientSession() as s:
        for message in (text, text, json.dumps(other)):
            ws = await s.ws_connect(gateway.ws_url, params={"access_token": gateway.token("alice")})
            assert (await ws.receive_json())["type"] == "authenticated"
            await ws.send_str(message)
            answers.append(await ws.receive_json())
            await ws.close()
    assert answers[0]["type"] == "published" and answers[0]["req"] == "r2"
    assert answers[1] == answers[0]
    refused = answers[2]
    assert refused["type"] == "error" and refused["req"] == "r2"
    assert refused["code"] == "idempotency_key_reused"
    assert log_length(store) == 1


async def test_a_key_sent_with_other_events_is_refused_and_writes_nothing(
    gateway: ServedGateway, store: redis.Redis
) -> None:
    # Likes of tweets by eight authors: the second batch reaches partitions the first did not.
    likes = [
        {"type": "like", "payload": {"user": "ann", "tweet": f"author{i}:1"}} for i in range(8)
    ]
    key = [("Idempotency-Key", "k-2")]
    assert (await post(gateway, "ann", likes[:1], key))[0] == 202
    before = log_length(store)
    status, body = await post(gateway, "ann", likes, key)
    assert (status, body["code"]) == (422, "idempotency_key_reused")
    assert "Idempotency-Key" in body["message"]
    assert log_length(store) == before
    assert (await post(gateway, "ann", likes[:1], key))[0] == 202
    assert log_length(store) == before


@pytest.mark.parametrize("headers", [
    [("Idempotency-Key", "a key")],
    [("Idempotency-Key", "x" * 201)],
    [("Idempotency-Key", "clé")],
    [("Idempotency-Key", "k"), ("Idempotency-Key", "k")],
])  # fmt: skip
async def test_a_key_that_is_not_one_is_refused(
    gateway: ServedGateway, store: redis.Redis, headers: list[tuple[str, str]]
) -> None:
    status, body = await post(gateway, "ann", profiles(["ann"]), headers)
    assert (status, body["code"]) == (400, "invalid_idempotency_key")
    assert log_length(store) == 0
