"""The two sides of ``bench.rebuild``'s latency: the renames the writer posts, numbered across
its runs, and the SSE readers that record what they were shown."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson

from bench.common import token
from bench.latency import Phase


class Renames(Phase):
    """A ``bench.latency`` phase whose renames are numbered across the writer's runs, and whose
    latencies keep the time their POST was sent, to fall in a window."""

    def __init__(self, rate: int) -> None:
        super().__init__(rate)
        self.serial = 0
        self.timed: list[tuple[float, float]] = []  # (sent, latency in ms)

    def posted(self, user: int, seq: int, name: str, now: float) -> None:
        self.serial += 1
        super().posted(user, self.serial, name, now)

    def reflected(self, name: str | None, now: float, *, polled: bool = False) -> None:
        sent = self.sent.get(name) if name else None
        if sent is None or polled:
            return
        user, seq, _ = sent
        queue = self.pending[user]
        while queue and queue[0][0] <= seq:
            at = queue.popleft()[1]
            self.timed.append((at, (now - at) * 1000))


@dataclass
class Reader:
    """One SSE subscription's rows, as the frames it was sent build them."""

    view: str
    key: str
    rows: dict[str, Any] = field(default_factory=dict)
    resets: list[str] = field(default_factory=list)
    ready: asyncio.Event = field(default_factory=asyncio.Event)

    def apply(self, event: bytes, data: dict[str, Any]) -> list[Any]:
        """The values the frame set; a reset's code is kept."""
        if event == b"reset":
            self.resets.append(data["code"])
            return []
        if event == b"snapshot":
            self.rows = dict(data["rows"])
            self.ready.set()
            return list(self.rows.values())
        if event == b"delta":
            values = []
            for op in data["ops"]:
                if op["op"] == "upsert":
                    self.rows[op["row"]] = op["value"]
                    values.append(op["value"])
                else:
                    self.rows.pop(op["row"], None)
            return values
        return []


async def subscribe(session: aiohttp.ClientSession, base: str, reader: Reader,
                    renames: Renames) -> None:  # fmt: skip
    url = f"{base}/v1/views/{reader.view}/{reader.key}/live"
    headers = {"Authorization": f"Bearer {token('observer')}"}
    async with session.get(url, headers=headers, timeout=aiohttp.ClientTimeout(total=None)) as r:
        r.raise_for_status()
        event = b""
        async for line in r.content:
            if line.startswith(b"event:"):
                event = line[6:].strip()
            elif line.startswith(b"data:"):
                now = time.monotonic()
                first = not reader.ready.is_set()
                values = reader.apply(event, orjson.loads(line[5:]))
                if reader.view == "profiles" and not first:  # a snapshot after a reset counts
                    for value in values:
                        renames.reflected(value.get("name"), now)
