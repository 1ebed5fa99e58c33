"""Groups under random schedules: at every group frame, every member equals the recomputation
of its view at the frame's frontier. Each client's group is a random choice of ``MEMBERS``, in
a random order.

Two pipelines (Chirp's ``profiles`` and ``entities``) are played through their real sinks, each
ending its batches where its source would: at the log's heads, or at the next cut for it that
it has not passed (``liveviews.changes.cuts.end_at_cut``, the source's own rule). The schedule
interleaves their batches, the cuts the gateway appends, and the client's disconnects, at
random; the model keeps every batch, so the views at any position are the batches up to it.
``LV_FAULT_SEED`` picks the schedules (default 1).
"""

from __future__ import annotations

import asyncio
import os
import random
from typing import Any

import aiohttp
import orjson
import redis

from demo.chirp import app
from demo.chirp.generate import Activity
from liveviews.changes.cuts import CUTS_READ, CUTS_STREAM, decode, end_at_cut
from liveviews.log.eventlog import EventLog
from liveviews.log.events import entry_id_tuple
from tests.server.api.test_gateway_ws import Socket, connect
from tests.support.gateway import ServedGateway, Writer
from tests.support.gateway_settings import PARTITIONS
from tests.support.groups import apply_group_frame

MEMBERS = [("p", "profiles", "ann"), ("t", "timeline", "ann"), ("q", "profiles", "bob")]
OWNER = {"profiles": "profiles", "timeline": "entities"}
ROUNDS = 4
STEPS = 40

Frontier = dict[str, str]


def at_or_before(frontier: Frontier, position: Frontier) -> bool:
    return all(entry_id_tuple(at) <= entry_id_tuple(position.get(p, "0-0"))
               for p, at in frontier.items())  # fmt: skip


class Pipelines:
    """Both pipelines and what they wrote: per pipeline, its batches (frontier, changes)."""

    def __init__(self, store: redis.Redis, writer: Writer, rng: random.Random) -> None:
        self.store, self.writer, self.rng = store, writer, rng
        self.log = EventLog(store, app, PARTITIONS)
        self.activity = Activity(users=10, seed=rng.randint(0, 10**6))
        self.batches: dict[str, list[tuple[Frontier, list[tuple[str, str, str, Any]]]]] = {
            "profiles": [], "entities": []}  # fmt: skip
        self.frontier: dict[str, Frontier] = {"profiles": {}, "entities": {}}
        self.serial = 0

    def heads(self) -> Frontier:
        out = {}
        for p in range(PARTITIONS):
            last = self.store.xrevrange(f"lv:log:{p}", count=1)
            out[str(p)] = last[0][0].decode() if last else "0-0"
        return out

    def append(self) -> None:
        self.log.append_batch(self.activity.take(self.rng.randint(1, 5)))

    def step(self, pipeline: str) -> None:
        """One batch of ``pipeline``, as its source would end it, with random changes."""
        start = self.frontier[pipeline] or {str(p): "0-0" for p in range(PARTITIONS)}
        cuts = decode(self.store.xrevrange(CUTS_STREAM, count=CUTS_READ))
        end = end_at_cut(pipeline, start, self.heads(), cuts)
        if end == start and self.batches[pipeline]:
            return  # nothing new to read: no batch
        changes = []
        for _ in range(self.rng.randint(0, 2)):
            self.serial += 1
            if pipeline == "profiles":
                user = self.rng.choice(["ann", "bob"])
                changes.append(("profiles", user, "profile", {"name": f"{user}{self.serial}"}))
            else:
                row = f"ann:{self.rng.randint(1, 3)}"
                value = None if self.rng.random() < 0.2 else {"n": self.serial}
                changes.append(("timeline", "ann", row, value))
        rows = [{"view": v, "key": k, "row": r,
                 "value": None if val is None else orjson.dumps(val).decode(), "score": 0.0}
                for v, k, r, val in changes]  # fmt: skip
        batch = len(self.batches[pipeline]) + 1
        self.writer.sinks[pipeline].write(rows, batch, {int(p): at for p, at in end.items()})
        self.batches[pipeline].append((end, changes))
        self.frontier[pipeline] = end

    def rows_at(self, view: str, key: str, position: Frontier) -> dict[str, Any]:
        """The view's rows of ``key`` at ``position``: its pipeline's batches up to it."""
        rows: dict[str, Any] = {}
        for frontier, changes in self.batches[OWNER[view]]:
            if not at_or_before(frontier, position):
                break
            for v, k, r, val in changes:
                if (v, k) == (view, key):
                    if val is None:
                        rows.pop(r, None)
                    else:
                        rows[r] = val
        return rows


class Client:
    """The group's client: rows applied a whole group frame at a time, checked at each."""

    def __init__(self, pipelines: Pipelines, members: list[tuple[str, str, str]]) -> None:
        self.pipelines = pipelines
        self.members = members
        self.rows: dict[str, dict[str, Any]] = {sub: {} for sub, _, _ in members}
        self.ids: dict[str, str] = {}
        self.frames = 0
        self.frontier: Frontier = {}

    def apply(self, msg: dict[str, Any]) -> None:
        assert msg["type"] == "group", msg
        data = msg["data"]
        apply_group_frame(data, self.rows, self.ids)
        self.frontier = data["frontier"]
        self.frames += 1
        for sub, view, key in self.members:
            expected = self.pipelines.rows_at(view, key, self.frontier)
            assert self.rows[sub] == expected, (sub, self.frontier, self.rows[sub], expected)

    async def drain(self, sock: Socket, wait: float = 0.05) -> None:
        """Apply every group frame that arrives within ``wait``."""
        while True:
            try:
                msg = await sock.next(timeout=wait)
            except TimeoutError:
                return
            self.apply(msg)

    def subscribe(self) -> dict[str, Any]:
        return {"type": "subscribe", "sub": "g", "members": [
            {"sub": sub, "view": view, "key": key,
             **({"last_event_id": self.ids[sub]} if sub in self.ids else {})}
            for sub, view, key in self.members]}  # fmt: skip


async def run(gateway: ServedGateway, store: redis.Redis, seed: int) -> tuple[int, int]:
    """One schedule, followed by two clients, each with a random group, on one gateway
    process: one reconnecting while the other keeps the outstanding cut its own."""
    store.flushdb()
    await asyncio.sleep(0.2)  # the gateway's feed notices the new store
    rng = random.Random(seed)
    pipelines = Pipelines(store, Writer(store, app, 8), rng)
    pipelines.append()
    for pipeline in ("profiles", "entities"):
        pipelines.step(pipeline)
    clients = [Client(pipelines, rng.sample(MEMBERS, rng.randint(1, len(MEMBERS))))
               for _ in range(2)]  # fmt: skip
    reconnects = 0
    async with aiohttp.ClientSession() as s:

        async def subscribed(client: Client) -> Socket:
            sock = await connect(s, gateway, gateway.token("ann"))
            assert (await sock.next())["type"] == "authenticated"
            await sock.send(**client.subscribe())
            return sock

        socks = [await subscribed(c) for c in clients]
        for _ in range(STEPS):
            roll = rng.random()
            if roll < 0.3:
                pipelines.append()
            elif roll < 0.55:
                pipelines.step("profiles")
            elif roll < 0.8:
                pipelines.step("entities")
            elif roll < 0.9:
                i = rng.randrange(len(clients))
                await socks[i].ws.close()
                reconnects += 1
                socks[i] = await subscribed(clients[i])
            for client, sock in zip(clients, socks, strict=True):
                await client.drain(sock)
        # Both pipelines read on to the log's heads, through every cut on the way: the group
        # then shows everything.
        heads = pipelines.heads()
        offsets = [{"partition": int(p), "id": at} for p, at in heads.items() if at != "0-0"]
        for sock in socks:  # a cut at the heads, at least
            await sock.send(type="wait", sub="g", offsets=offsets)
        for _ in range(50):
            for pipeline in ("profiles", "entities"):
                pipelines.step(pipeline)
            for client, sock in zip(clients, socks, strict=True):
                await client.drain(sock, 0.05)
            if all(c.frontier == heads for c in clients):
                break
        for client in clients:
            assert client.frontier == heads, (client.frontier, heads, pipelines.frontier)
        for sock in socks:
            await sock.ws.close()
    return sum(c.frames for c in clients), reconnects


async def test_every_group_frame_shows_every_member_as_of_its_frontier(
    gateway: ServedGateway, store: redis.Redis
) -> None:
    seed = int(os.environ.get("LV_FAULT_SEED") or 1)
    frames = reconnects = 0
    for round_ in range(ROUNDS):
        f, r = await run(gateway, store, seed * 1000 + round_)
        frames, reconnects = frames + f, reconnects + r
    print(f"{ROUNDS} schedules: {frames} group frames checked, {reconnects} reconnects")
    assert frames >= ROUNDS * 3 and reconnects >= 1
