"""Publishing: accepted shapes, offsets, and every rejection leaving the log untouched."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest
import redis

from streaming.core.events import decode_entry, log_stream
from tests.support.gateway import ServedGateway

PROFILE = {"type": "profile_set", "payload": {"user": "alice", "name": "Alice"}}
TWEET = {"type": "tweet_posted", "payload": {"user": "alice", "tweet": "alice:1", "text": "hi"}}


def log_length(store: redis.Redis) -> int:
    return sum(store.xlen(log_stream(p)) for p in range(4))


async def post(gw: ServedGateway, body: Any, raw: bytes | None = None, user: str = "alice",
               headers: dict[str, str] | None = None) -> tuple[int, Any]:  # fmt: skip
    async with aiohttp.ClientSession() as s:
        h = headers if headers is not None else gw.headers(user)
        if raw is not None:
            resp = await s.post(gw.url + "/v1/events", data=raw, headers=h)
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

        resp = await s.post(gateway.url + "/v1/events", data=body(), headers=gateway.headers())
        status, answer = resp.status, await resp.json()
    assert (status, answer["code"]) == (413, "body_too_large")
