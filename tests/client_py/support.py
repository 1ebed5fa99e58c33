"""What the client tests share: a client of a served gateway with short reconnect delays, and a
collector of a subscription's changes."""

from __future__ import annotations

import asyncio
from typing import Any

from liveviews.client import Change, Client, Subscription
from tests.support.gateway import ServedGateway

FAST = {"min_delay": 0.05, "max_delay": 0.5}
"""Reconnect delays for tests (the defaults are client-js's 0.5 to 20 s)."""


def client_of(
    gateway: ServedGateway, url: str | None = None, user: str = "alice", **options: Any
) -> Client:
    if "token_provider" not in options:
        options.setdefault("token", gateway.token(user))
    return Client(url or gateway.url, **{**FAST, **options})


def task(title: str) -> dict[str, str]:
    return {"title": title}


class Collected:
    """Every change of a subscription, gathered by a task of the test's loop."""

    def __init__(self, sub: Subscription) -> None:
        self.changes: list[Change] = []
        self._task = asyncio.create_task(self._collect(sub))

    async def _collect(self, sub: Subscription) -> None:
        async for change in sub:
            self.changes.append(change)

    async def until(self, predicate: Any, timeout: float = 10.0) -> None:
        async with asyncio.timeout(timeout):
            while not predicate(self.changes):
                await asyncio.sleep(0.01)

    def deltas(self) -> list[Change]:
        return [c for c in self.changes if c.kind == "delta"]

    def snapshots(self) -> list[Change]:
        return [c for c in self.changes if c.kind == "snapshot"]

    async def stop(self) -> None:
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)


def titles(changes: list[Change]) -> list[str]:
    """The title each delta's upsert set, in order."""
    return [op["value"]["title"] for c in changes for op in c.ops if op["op"] == "upsert"]
