"""Random hand-outs through a hub with cohorts and one without (``liveviews.gateway.fanout.cohort``).

Each seed scripts 400 steps on 8 real loopback connections, half of them with small socket
buffers and readers that pause: runs of deltas, batches out of order, old deltas, frontiers
riding on deltas and on their own, heartbeats from the ticker, wakes, and turns of the loop.
Every client must get the same frames (heartbeats aside) with cohorts as without, in a chunked
body that parses (no bytes of two writes interleaved), and the hub's bookkeeping must hold
after every step: each subscriber in exactly one of a cohort or its key's loose set, no member
woken or with bytes queued, no empty cohort, and nothing left waiting for a subscriber gone.
"""

from __future__ import annotations

import asyncio
import random
import socket
import threading
import time
from types import SimpleNamespace
from typing import Any, cast

import pytest

from liveviews.changes.topic import VIEWS_FRONTIER, Delta
from liveviews.gateway.fanout.hub import Hub
from liveviews.gateway.fanout.items import Progress
from liveviews.gateway.fanout.subscription import Source, Subscription
from liveviews.gateway.live.sse import SseSender, sse_cohort
from liveviews.gateway.live.ticker import Ticker
from liveviews.gateway.metrics import Metrics
from liveviews.gateway.wire import frames
from tests.support.sockets import LOOPS, connected_pair, run_on, sse_frames

EPOCH = "e"
KEY = ("likes", "a")
HEARTBEAT = 15.0


def delta(entry: str, size: int) -> Delta:
    return Delta(entry, *KEY, [{"op": "upsert", "row": entry, "value": "x" * size}],
                 "liveviews", 1)  # fmt: skip


def frontier(entry: str, label: str) -> Progress:
    return Progress(EPOCH, entry, frames.progress({"0": label}), VIEWS_FRONTIER)


class Reader(threading.Thread):
    def __init__(self, sock: socket.socket, seed: int, slow: bool) -> None:
        super().__init__(daemon=True)
        self.sock, self.data = sock, bytearray()
        self.rng = random.Random(seed)
        self.slow = slow

    def run(self) -> None:
        while True:
            if self.slow and self.rng.random() < 0.3:
                time.sleep(self.rng.random() * 0.01)
            part = self.sock.recv(self.rng.choice([512, 4096, 1 << 16]))
            if not part:
                return
            self.data += part


def frames_without_heartbeats(data: bytes) -> list[bytes]:
    return [f for f in sse_frames(data) if f != b": heartbeat"]


def check_invariants(hub: Hub, streams: list[SseSender]) -> None:
    for s in streams:
        sub = s.sub.subscriber
        assert sub is not None
        if sub not in hub.all:
            continue
        key = (sub.view, sub.key)
        in_loose = sub in hub.by_key.get(key, set())
        if sub.cohort is not None:
            assert not in_loose, "in a cohort and loose: would get items twice"
            assert hub.cohorts.get(key) is sub.cohort
            assert sub in sub.cohort.members  # type: ignore[attr-defined]
            assert not sub.woken
            queued = s.transport.get_write_buffer_size()
            assert s.transport.is_closing() or not queued, "a member with bytes queued"
        else:
            assert in_loose, "neither in a cohort nor loose: gets nothing"
    for c in hub.cohorts.values():
        assert len(c) > 0
        for sub in c.members:  # type: ignore[attr-defined]
            assert sub.cohort is c
    assert all(hub.settling.values()), "an empty set left waiting to join"


async def scenario(cohorts: bool, seed: int) -> list[list[bytes]]:
    rng = random.Random(seed)
    metrics = Metrics()
    ticker = Ticker(HEARTBEAT, metrics)
    new_cohort = (lambda: sse_cohort(ticker, metrics)) if cohorts else None
    hub = Hub(metrics, 0.0, new_cohort=new_cohort)
    n = 8
    pairs = [await connected_pair(rcvbuf=4096 if i % 2 else None) for i in range(n)]
    readers = []
    streams: list[SseSender] = []
    for i, (t, c) in enumerate(pairs):
        if i % 2:
            t.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4608)
        reader = Reader(c, seed * 100 + i, slow=bool(i % 2))
        reader.start()
        readers.append(reader)
        sub = Subscription(cast(Source, SimpleNamespace(hub=hub)), *KEY, None)
        sub.subscriber = hub.attach(*KEY, 10_000_000)
        sub.epoch = EPOCH
        stream = SseSender(sub, t, ticker, metrics, float("inf"), lambda: None)
        sub.subscriber.sink = stream
        sub.subscriber.on_wake = stream.woken
        ticker.streams.add(stream)  # ticked by the script below, not by the ticker's task
        hub.settle(sub.subscriber)
        streams.append(stream)
    seq = 10
    now = ticker.now
    labels = ["A", "B", "C"]
    for _ in range(400):
        r = rng.random()
        if r < 0.35:
            k = rng.choice([1, 1, 2, 3])
            batch = []
            for _ in range(k):
                seq += 1
                batch.append(delta(f"{seq}-0", rng.choice([50, 1500, 5000])))
            if rng.random() < 0.1 and k > 1:
                batch.reverse()  # not ascending: no run
            if rng.random() < 0.1:
                batch.append(delta(f"{seq - 3}-0", 50))  # an old one
            label = rng.choice(labels) + str(seq // 5)
            prog = [frontier(f"{seq}-0", label)] if rng.random() < 0.7 else []
            hub.publish(EPOCH, batch, prog)
        elif r < 0.5:
            alone = frontier(f"{seq}-{rng.randint(0, 3)}", rng.choice(labels) + str(seq))
            hub.publish(EPOCH, [], [alone])
        elif r < 0.6:
            now += HEARTBEAT * rng.choice([0.5, 1.0, 1.1])
            ticker.tick(now, time.time())
        elif r < 0.7:
            s = rng.choice(streams)
            assert s.sub.subscriber is not None
            s.sub.subscriber.wake()
        elif r < 0.8:
            await asyncio.sleep(rng.random() * 0.005)
        else:
            await asyncio.sleep(0)
        check_invariants(hub, streams)
    # every client reads to the end of what was written
    for _ in range(1000):
        if not any(s.transport.get_write_buffer_size() for s in streams):
            break
        await asyncio.sleep(0.01)
    for s in streams:
        s.transport.close()
    await asyncio.sleep(0.05)
    for rd in readers:
        await asyncio.to_thread(rd.join, 10)
    hub.close()
    return [frames_without_heartbeats(bytes(rd.data)) for rd in readers]


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("loop_name", sorted(LOOPS))
def test_random_hand_outs_send_the_same_with_cohorts_as_without(loop_name: str, seed: int) -> None:
    got: dict[bool, Any] = {}

    async def main() -> None:
        for cohorts in (True, False):
            got[cohorts] = await scenario(cohorts, seed)

    run_on(loop_name, main)
    for i, (a, b) in enumerate(zip(got[True], got[False], strict=True)):
        assert a == b, f"client {i}: {len(a)} vs {len(b)} frames"
    for fr in got[False][1:]:
        assert fr == got[False][0]
