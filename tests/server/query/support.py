"""What a client of a query-shaped subscription builds from its frames, with the checks that it
never saw a gap or a duplicate, and the truth to compare it with, read from the store."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson
import redis

from liveviews.changes.topic import index_key, rank_key, rows_key, shard_for
from tests.support.gateway import Event
from tests.support.gateway_settings import SHARDS


@dataclass
class PrefixState:
    """The keys a prefix subscriber holds; every delta's (shard, position) is seen once, and a
    key's deltas come in order."""

    keys: dict[str, dict[str, Any]] = field(default_factory=dict)
    last_id: str | None = None
    seen: set[tuple[int, str]] = field(default_factory=set)
    last_of_key: dict[str, tuple[int, int]] = field(default_factory=dict)
    resets: int = 0
    deltas: int = 0

    def apply(self, event: str, event_id: str | None, data: dict[str, Any]) -> None:
        if event == "snapshot":
            self.keys = {k: dict(rows) for k, rows in data["keys"].items()}
            self.last_of_key = {}
        elif event == "delta":
            assert event_id is not None
            key = data["key"]
            shard = shard_for(data["view"], key, SHARDS)
            at = event_id.split(".")[1].split("~")[shard]  # a filter's digest may follow
            assert (shard, at) not in self.seen, f"delta {at} of shard {shard} sent twice"
            self.seen.add((shard, at))
            pos = tuple(int(x) for x in at.split("-")) if at != "0" else (0, 0)
            assert pos > self.last_of_key.get(key, (0, 0)), f"deltas of {key} out of order"
            self.last_of_key[key] = pos  # type: ignore[assignment]
            rows = self.keys.setdefault(key, {})
            for op in data["ops"]:
                if op["op"] == "upsert":
                    rows[op["row"]] = op["value"]
                else:
                    rows.pop(op["row"], None)
            if not rows:
                del self.keys[key]
            self.deltas += 1
        elif event == "reset":
            self.resets += 1
        if event_id is not None:
            self.last_id = event_id

    def take(self, ev: Event) -> None:
        self.apply(ev.event, ev.id, ev.data)


@dataclass
class WindowState:
    """The rows of a window a subscriber holds, with their scores; positions only increase."""

    rows: dict[str, Any] = field(default_factory=dict)
    scores: dict[str, float] = field(default_factory=dict)
    last_id: str | None = None
    resets: int = 0
    deltas: int = 0

    def apply(self, event: str, event_id: str | None, data: dict[str, Any]) -> None:
        if event == "snapshot":
            self.rows = dict(data["rows"])
            self.scores = dict(data["scores"])
        elif event == "delta":
            assert event_id is not None
            if self.last_id is not None:
                assert position(event_id) > position(self.last_id), "window deltas out of order"
            for op in data["ops"]:
                if op["op"] == "upsert":
                    self.rows[op["row"]] = op["value"]
                    self.scores[op["row"]] = op["score"]
                else:
                    self.rows.pop(op["row"], None)
                    self.scores.pop(op["row"], None)
            self.deltas += 1
        elif event == "reset":
            self.resets += 1
        if event_id is not None:
            self.last_id = event_id

    def take(self, ev: Event) -> None:
        self.apply(ev.event, ev.id, ev.data)

    def ordered(self) -> list[str]:
        return sorted(self.rows, key=lambda r: (self.scores[r], r), reverse=True)


def position(event_id: str) -> tuple[int, int]:
    ms, seq = event_id.split(".")[1].split("-")
    return int(ms), int(seq)


def stored_keys(store: redis.Redis, view: str, prefix: str) -> dict[str, dict[str, Any]]:
    """The view's keys with the prefix and their rows, from every shard's index."""
    out = {}
    for shard in range(SHARDS):
        found: Any = store.zrange(index_key(shard, view), 0, -1)
        for raw in found:
            key = raw.decode()
            if key.startswith(prefix):
                rows: Any = store.hgetall(rows_key(shard, view, key))
                out[key] = {r.decode(): orjson.loads(v) for r, v in rows.items()}
    return out


def stored_window(
    store: redis.Redis, view: str, key: str, view_limit: int, limit: int,
    after: tuple[float, str] | None = None,
) -> list[tuple[str, float, Any]]:  # fmt: skip
    """The window as the store holds it: the key's served rows in score order."""
    shard = shard_for(view, key, SHARDS)
    top: Any = store.zrevrange(rank_key(shard, view, key), 0, view_limit - 1, withscores=True)
    rows: Any = store.hgetall(rows_key(shard, view, key))
    ranked = [(float(s), m.decode()) for m, s in top]
    if after is not None:
        ranked = [r for r in ranked if r < after]
    return [(row, score, orjson.loads(rows[row.encode()])) for score, row in ranked[:limit]]


class Socket:
    """A WebSocket client that reads one message at a time."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws

    async def send(self, **msg: Any) -> None:
        await self.ws.send_str(json.dumps(msg))

    async def next(
        self, skip: tuple[str, ...] = ("heartbeat", "progress", "authenticated")
    ) -> dict[str, Any]:
        """The next message not of the types in ``skip``, within 10 s in all."""
        async with asyncio.timeout(10):
            while True:
                m = await self.ws.receive()
                assert m.type == aiohttp.WSMsgType.TEXT, f"the socket ended: {m}"
                msg: dict[str, Any] = json.loads(m.data)
                if msg["type"] not in skip:
                    return msg
