"""A key's SSE streams in step share one cursor and one loop of writes (``liveviews.gateway.fanout.cohort``).

The cohort must change nothing a client sees: each test runs the same hand-out through a hub
with cohorts and one without, on real loopback connections, and compares what every client
received, frame by frame, and the metrics. Some clients read late through small socket buffers,
so the cohort meets partial writes and sockets that take nothing; one connection closes midway.
"""

from __future__ import annotations

import asyncio
import os
import socket
import threading
from types import SimpleNamespace
from typing import Any, cast

import pytest

from liveviews.changes.topic import VIEWS_FRONTIER, Delta
from liveviews.gateway.fanout.hub import Hub
from liveviews.gateway.fanout.items import FeedDelta, Progress
from liveviews.gateway.fanout.subscription import Source, Subscription
from liveviews.gateway.live import sse as sse_module
from liveviews.gateway.live.sse import SseSender, http_chunk, sse_cohort
from liveviews.gateway.live.ticker import Ticker
from liveviews.gateway.metrics import Metrics
from liveviews.gateway.wire import frames
from liveviews.gateway.wire.eventid import position_tuple
from tests.support.sockets import LOOPS, connected_pair, read_exactly, run_on, sse_frames

EPOCH = "e"
KEY = ("likes", "a")


def delta(entry: str, size: int = 64) -> Delta:
    return Delta(entry, *KEY, [{"op": "upsert", "row": entry, "value": "x" * size}],
                 "liveviews", 1)  # fmt: skip


def frontier(entry: str) -> Progress:
    return Progress(EPOCH, entry, frames.progress({"0": entry}), VIEWS_FRONTIER)


def make_hub(cohorts: bool) -> tuple[Hub, Ticker]:
    metrics = Metrics()
    ticker = Ticker(15.0, metrics)
    new_cohort = (lambda: sse_cohort(ticker, metrics)) if cohorts else None
    return Hub(metrics, 0.0, new_cohort=new_cohort), ticker


def open_stream(hub: Hub, ticker: Ticker, transport: asyncio.Transport) -> SseSender:
    """A stream of likes/a, up to date at the start of the epoch, that the hub writes to."""
    sub = Subscription(cast(Source, SimpleNamespace(hub=hub)), *KEY, None)
    sub.subscriber = hub.attach(*KEY, 1_000)
    sub.epoch = EPOCH
    stream = SseSender(sub, transport, ticker, hub.metrics, float("inf"), lambda: None)
    sub.subscriber.sink = stream
    hub.settle(sub.subscriber)
    return stream


class Reader(threading.Thread):
    """Reads a client socket to its end, once ``go`` is set."""

    def __init__(self, sock: socket.socket, go: threading.Event) -> None:
        super().__init__(daemon=True)
        self.sock, self.go, self.data = sock, go, bytearray()

    def run(self) -> None:
        self.go.wait()
        while part := self.sock.recv(1 << 16):
            self.data += part


async def drained(transports: list[asyncio.Transport]) -> None:
    for _ in range(500):
        if not any(t.get_write_buffer_size() for t in transports if not t.is_closing()):
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the clients did not take what was written")


async def hand_out(cohorts: bool, sndbuf: int = 4_608) -> dict[str, Any]:
    """12 streams of one key: 8 read along, 3 read only after the hand-out through small
    buffers, 1 closes midway. 120 reads of the feed: single deltas, runs, frontiers alone."""
    hub, ticker = make_hub(cohorts)
    late, go_now = threading.Event(), threading.Event()
    go_now.set()
    pairs = [await connected_pair(rcvbuf=4_096 if i >= 8 else None) for i in range(12)]
    transports = [t for t, _ in pairs]
    readers = []
    for i, (transport, client) in enumerate(pairs):
        if 8 <= i < 11:
            transport.get_extra_info("socket").setsockopt(
                socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf
            )
        readers.append(Reader(client, late if 8 <= i < 11 else go_now))
        readers[-1].start()
    streams = [open_stream(hub, ticker, t) for t in transports]
    in_cohort, trace = [], []
    m = hub.metrics
    seq = 0
    for i in range(120):
        if i == 60:
            transports[11].close()
        if i % 10 == 9:
            hub.publish(EPOCH, [], [frontier(f"{seq}-9")])
        else:
            n = 1 if i % 3 else 3
            batch = [delta(f"{seq + j + 1}-0", 64 if i % 2 else 1_500) for j in range(n)]
            seq += n
            hub.publish(EPOCH, batch, [frontier(f"{seq}-0")])
        in_cohort.append(len(hub.cohorts.get(KEY, ())))
        trace.append((m.deltas_out, m.frames_out, m.bytes_out, m.slow_consumers))
        await asyncio.sleep(0)
    late.set()
    await drained(transports)
    # Once their sockets took everything, the late readers are in step again.
    hub.publish(EPOCH, [delta(f"{seq + 1}-0")], [frontier(f"{seq + 1}-0")])
    hub.publish(EPOCH, [delta(f"{seq + 2}-0")], [frontier(f"{seq + 2}-0")])
    in_cohort.append(len(hub.cohorts.get(KEY, ())))
    await drained(transports)
    for stream in streams:
        assert stream.sub.subscriber is not None
        hub.unsettle(stream.sub.subscriber)  # as a wake would, before its reader looks
    cursors = [(s.sub.position, s.sub.last_event_id, s.sub.frontier) for s in streams[:11]]
    for transport in transports:
        transport.close()
    await asyncio.sleep(0.05)
    for reader in readers:
        await asyncio.to_thread(reader.join, 10)
    hub.close()
    return {
        "frames": [sse_frames(bytes(r.data)) for r in readers],
        "metrics": (m.deltas_out, m.frames_out, m.bytes_out, m.slow_consumers),
        "trace": trace,
        "in_cohort": in_cohort,
        "cursors": cursors,
        "streams": streams,
    }


@pytest.mark.parametrize("loop_name", sorted(LOOPS))
def test_streams_in_a_cohort_get_what_streams_on_their_own_get(loop_name: str) -> None:
    got: dict[bool, dict[str, Any]] = {}

    async def main() -> None:
        for cohorts in (True, False):
            got[cohorts] = await hand_out(cohorts)

    run_on(loop_name, main)
    with_cohort, alone = got[True], got[False]
    assert with_cohort["frames"] == alone["frames"]
    assert with_cohort["metrics"] == alone["metrics"]
    assert with_cohort["trace"] == alone["trace"], "the same counts after every read"
    deltas = [f for f in alone["frames"][0] if b"event: delta" in f]
    assert len(deltas) == 180 + 2, "every delta once, to a client that read along"
    for frames_of_one in alone["frames"][:11]:
        assert frames_of_one == alone["frames"][0]
    # The closed connection got the first half, then nothing: dropped, in both.
    assert 0 < len(alone["frames"][11]) < len(alone["frames"][0])
    assert alone["metrics"][3] == 1
    # The cohort held the readers in step: all 12 at first, the late ones out while their
    # sockets were full, and all 11 open ones again at the end.
    assert with_cohort["in_cohort"][0] == 12
    assert min(with_cohort["in_cohort"][:-1]) < 9
    assert with_cohort["in_cohort"][-1] == 11
    # A stream's own cursor is the cohort's whenever it looks: after leaving, the same as
    # a stream that never was in one.
    assert with_cohort["cursors"] == alone["cursors"]


@pytest.mark.parametrize("loop_name", sorted(LOOPS))
def test_a_member_whose_socket_takes_nothing_gets_the_item_queued(loop_name: str) -> None:
    async def main() -> None:
        hub, ticker = make_hub(cohorts=True)
        (t1, c1), (t2, c2) = [await connected_pair(rcvbuf=4_096) for _ in range(2)]
        t2.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4_608)
        streams = [open_stream(hub, ticker, t) for t in (t1, t2)]
        hub.publish(EPOCH, [delta("5-0")], [frontier("5-0")])
        assert len(hub.cohorts[KEY]) == 2
        filler = 0  # the client's socket filled by other writes, to the last byte
        while True:
            try:
                filler += os.write(streams[1].fd, b"." * 4_096)
            except BlockingIOError:
                break
        hub.publish(EPOCH, [delta("6-0")], [frontier("6-0")])
        assert t2.get_write_buffer_size() > 0, "the delta waits on the transport"
        subscriber = streams[1].sub.subscriber
        assert subscriber is not None and subscriber.cohort is None
        assert streams[1].sub.last_event_id is not None
        assert streams[1].sub.last_event_id.endswith("6-0")
        expected = b"".join(
            http_chunk(FeedDelta(EPOCH, delta(e)).frame.sse + frontier(e).frame.sse)
            for e in ("5-0", "6-0")
        )
        got = await asyncio.to_thread(read_exactly, c2, filler + len(expected))
        assert got.replace(b"." * filler, b"", 1) == expected
        for transport, client in ((t1, c1), (t2, c2)):
            transport.close()
            client.close()
        hub.close()

    run_on(loop_name, main)


@pytest.mark.parametrize("loop_name", sorted(LOOPS))
def test_a_stream_that_ends_while_waiting_to_rejoin_leaves_nothing_behind(loop_name: str) -> None:
    async def main() -> None:
        hub, ticker = make_hub(cohorts=True)
        transport, client = await connected_pair(rcvbuf=4_096)
        transport.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4_608)
        stream = open_stream(hub, ticker, transport)
        subscriber = stream.sub.subscriber
        assert subscriber is not None and subscriber.cohort is not None
        while True:  # the client's socket full
            try:
                os.write(stream.fd, b"." * 4_096)
            except BlockingIOError:
                break
        hub.publish(EPOCH, [delta("5-0")], [frontier("5-0")])
        assert subscriber.cohort is None and subscriber in hub.settling[KEY], "given back"
        stream.sub.close()  # its client went away before it was in step again
        hub.publish(EPOCH, [delta("6-0")], [frontier("6-0")])
        assert (hub.all, hub.by_key, hub.cohorts, hub.settling) == (set(), {}, {}, {})
        transport.abort()
        client.close()
        hub.close()

    run_on(loop_name, main)


@pytest.mark.parametrize("loop_name", sorted(LOOPS))
def test_a_woken_member_leaves_with_the_cohorts_cursor(loop_name: str) -> None:
    async def main() -> None:
        hub, ticker = make_hub(cohorts=True)
        pairs = [await connected_pair() for _ in range(3)]
        streams = [open_stream(hub, ticker, t) for t, _ in pairs]
        hub.publish(EPOCH, [delta("5-0"), delta("6-0")], [frontier("6-0")])
        cohort = hub.cohorts[KEY]
        assert len(cohort) == 3
        assert streams[0].sub.position == (0, 0), "a member's own cursor waits in the cohort"
        subscriber = streams[0].sub.subscriber
        assert subscriber is not None
        subscriber.wake()  # as a reset, a lost connection or an expired token would
        assert subscriber.cohort is None and len(cohort) == 2
        sub = streams[0].sub
        assert sub.position == position_tuple("6-0")
        assert sub.last_event_id is not None and sub.last_event_id.endswith("6-0")
        assert sub.frontier == frontier("6-0").frontier
        for transport, client in pairs:
            transport.close()
            client.close()
        hub.close()

    run_on(loop_name, main)


@pytest.mark.parametrize("loop_name", sorted(LOOPS))
def test_a_stream_joins_only_once_its_cursor_is_the_cohorts(
    loop_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    writes: list[int] = []
    os_write = sse_module._os_write

    def noting(fd: int, data: bytes) -> int:
        writes.append(fd)
        return os_write(fd, data)

    async def main() -> None:
        hub, ticker = make_hub(cohorts=True)
        (t1, c1), (t2, c2) = [await connected_pair() for _ in range(2)]
        first = open_stream(hub, ticker, t1)
        hub.publish(EPOCH, [delta("5-0")], [frontier("5-0")])
        second = open_stream(hub, ticker, t2)  # its snapshot was older: not in step
        assert len(hub.cohorts[KEY]) == 1
        assert second.sub.subscriber is not None and second.sub.subscriber.cohort is None
        second.sub.position = position_tuple("5-0")  # as if its snapshot was read at 5-0
        hub.publish(EPOCH, [delta("6-0")], [frontier("6-0")])
        assert len(hub.cohorts[KEY]) == 2, "in step after a delta and frontier taken alike"
        monkeypatch.setattr(sse_module, "_os_write", noting)
        hub.publish(EPOCH, [delta("7-0")], [frontier("7-0")])
        monkeypatch.undo()
        assert sorted(writes) == sorted([first.fd, second.fd])
        for transport, client in ((t1, c1), (t2, c2)):
            transport.close()
            client.close()
        hub.close()

    run_on(loop_name, main)
