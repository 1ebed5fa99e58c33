"""An SSE stream's writes to its connection: straight to the socket while the transport holds
nothing unsent, through the transport otherwise, and never a byte lost, repeated or reordered.

Run on real loopback TCP connections under both event loops the gateway can serve on (uvloop,
and asyncio's own), with the transport the loop makes.
"""

from __future__ import annotations

import asyncio
import socket
import struct
from types import SimpleNamespace
from typing import Any, cast

import pytest

from liveviews.changes.topic import VIEWS_FRONTIER, Delta
from liveviews.gateway.fanout.hub import Hub
from liveviews.gateway.fanout.items import FeedDelta, Progress
from liveviews.gateway.fanout.subscription import Source, Subscription
from liveviews.gateway.live.source import FrameSource
from liveviews.gateway.live.sse import SseSender, http_chunk
from liveviews.gateway.live.ticker import Ticker
from liveviews.gateway.metrics import Metrics
from liveviews.gateway.wire import frames
from liveviews.gateway.wire.eventid import position_tuple
from tests.support.sockets import LOOPS, connected_pair, read_exactly, run_on


def stream_on(transport: asyncio.Transport, capacity: int = 1_000_000) -> SseSender:
    sub = SimpleNamespace(subscriber=SimpleNamespace(capacity=capacity), cursor=None)
    metrics = Metrics()
    return SseSender(cast(FrameSource, sub), transport, Ticker(15.0, metrics), metrics,
                      float("inf"), lambda: None)  # fmt: skip


@pytest.mark.parametrize("loop_name", sorted(LOOPS))
def test_writes_arrive_whole_and_in_order_when_the_socket_fills(loop_name: str) -> None:
    chunks = [b"%06d:" % i + bytes([65 + i % 26]) * 4093 for i in range(2_000)]  # 8 MB

    async def main() -> None:
        transport, client = await connected_pair(rcvbuf=65_536)
        stream = stream_on(transport)
        queued_at = None
        for i, chunk in enumerate(chunks):
            assert stream._write(chunk)
            if queued_at is None and transport.get_write_buffer_size():
                queued_at = i
        # The client read nothing: the socket filled, and the transport took the rest.
        assert queued_at is not None and queued_at > 0
        assert transport.get_write_buffer_size() > 0
        expected = b"".join(chunks)
        got = await asyncio.to_thread(read_exactly, client, len(expected))
        assert got == expected
        assert stream.metrics.bytes_out == len(expected)
        client.close()
        transport.close()

    run_on(loop_name, main)


@pytest.mark.parametrize("loop_name", sorted(LOOPS))
def test_a_write_to_a_reset_connection_closes_the_transport_without_raising(
    loop_name: str,
) -> None:
    async def main() -> None:
        transport, client = await connected_pair()
        transport.pause_reading()  # only a write can find out that the peer is gone
        stream = stream_on(transport)
        assert stream._write(b"first")
        assert read_exactly(client, 5) == b"first"
        client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        client.close()  # a reset, not a clean close
        await asyncio.sleep(0.05)
        for _ in range(3):
            stream._write(b"after the reset")
            await asyncio.sleep(0.01)
        for _ in range(100):
            if transport.is_closing():
                break
            await asyncio.sleep(0.01)
        assert transport.is_closing()
        assert not stream._write(b"once closed")

    run_on(loop_name, main)


class SocketlessTransport:
    """A transport with no socket underneath (as a wrapping server may give): writes queue here."""

    def __init__(self) -> None:
        self.written: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def is_closing(self) -> bool:
        return False

    def get_write_buffer_size(self) -> int:
        return 0

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default


def test_a_transport_without_a_socket_gets_every_write() -> None:
    transport = SocketlessTransport()
    stream = stream_on(cast(asyncio.Transport, transport))
    for chunk in (b"a", b"b", b"c"):
        assert stream._write(chunk)
    assert transport.written == [b"a", b"b", b"c"]


EPOCH = "e"


def delta(entry: str) -> Delta:
    return Delta(entry, "likes", "a", [{"op": "delete", "row": entry}], "liveviews", 1)


def subscribed(hub: Hub, transport: asyncio.Transport, after: str | None = None) -> SseSender:
    """A stream of likes/a up to date at ``after``, that the hub writes to."""
    sub = Subscription(cast(Source, SimpleNamespace(hub=hub)), "likes", "a", None)
    sub.subscriber = hub.attach("likes", "a", 16)
    sub.epoch = EPOCH
    if after is not None:
        sub.position = position_tuple(after)
    stream = SseSender(sub, transport, Ticker(15.0, hub.metrics), hub.metrics, float("inf"),
                        lambda: None)  # fmt: skip
    sub.subscriber.sink = stream
    return stream


def unread(client: socket.socket) -> bytes:
    client.setblocking(False)
    try:
        return client.recv(1 << 16)
    except BlockingIOError:
        return b""
    finally:
        client.setblocking(True)


@pytest.mark.parametrize("loop_name", sorted(LOOPS))
def test_a_keys_deltas_of_one_read_and_their_frontier_go_out_in_one_chunk(loop_name: str) -> None:
    async def main() -> None:
        hub = Hub(Metrics())
        transport, client = await connected_pair()
        subscribed(hub, transport)
        deltas = [delta("1-0"), delta("1-1"), delta("2-0")]
        frontier = Progress(EPOCH, "2-0", frames.progress({"0": "2-0"}), VIEWS_FRONTIER)
        hub.publish(EPOCH, deltas, [frontier])
        body = b"".join(FeedDelta(EPOCH, d).frame.sse for d in deltas) + frontier.frame.sse
        assert read_exactly(client, len(http_chunk(body))) == http_chunk(body)
        assert unread(client) == b""
        assert (hub.metrics.deltas_out, hub.metrics.frames_out) == (3, 4)
        client.close()
        transport.close()
        hub.close()

    run_on(loop_name, main)


@pytest.mark.parametrize("loop_name", sorted(LOOPS))
def test_a_stream_that_has_part_of_a_run_gets_only_the_rest(loop_name: str) -> None:
    async def main() -> None:
        hub = Hub(Metrics())
        transport, client = await connected_pair()
        stream = subscribed(hub, transport, after="1-1")
        hub.publish(EPOCH, [delta("1-0"), delta("1-1"), delta("2-0")])
        expected = http_chunk(FeedDelta(EPOCH, delta("2-0")).frame.sse)
        assert read_exactly(client, len(expected)) == expected
        assert unread(client) == b""
        assert stream.sub.last_event_id is not None and stream.sub.last_event_id.endswith("2-0")
        client.close()
        transport.close()
        hub.close()

    run_on(loop_name, main)


@pytest.mark.parametrize("loop_name", sorted(LOOPS))
def test_a_run_counts_each_of_its_deltas_against_the_buffer_of_a_stream_behind(
    loop_name: str,
) -> None:
    async def main() -> None:
        transport, client = await connected_pair(rcvbuf=65_536)
        stream = stream_on(transport, capacity=10)
        while not transport.get_write_buffer_size():
            assert stream._write(b"x" * 65_536)
        stream.pending = 1  # the client has read nothing since the transport began to queue
        assert stream._write(b"a run of 9", 9)
        assert not stream._write(b"one more", 1), "11 deltas behind, with a buffer of 10"
        client.close()
        transport.close()

    run_on(loop_name, main)


@pytest.mark.parametrize("loop_name", sorted(LOOPS))
def test_wakes_before_the_streams_task_starts_make_one_task(loop_name: str) -> None:
    """A stream behind is run by one task at a time: two tasks reading one subscription could
    write its frames out of order, the second's while the first awaits a reset."""

    async def main() -> None:
        hub = Hub(Metrics())
        transport, client = await connected_pair()
        stream = subscribed(hub, transport)
        subscriber = stream.sub.subscriber
        assert subscriber is not None
        subscriber.sink = None  # behind: the hub buffers its items and wakes its reader
        subscriber.on_wake = stream.woken
        before = asyncio.all_tasks()
        hub.publish(EPOCH, [delta("1-0")])
        hub.publish(EPOCH, [delta("2-0")])
        assert len(asyncio.all_tasks() - before) == 1
        while subscriber.sink is not stream:
            await asyncio.sleep(0.01)
        expected = b"".join(http_chunk(FeedDelta(EPOCH, delta(e)).frame.sse)
                            for e in ("1-0", "2-0"))  # fmt: skip
        assert read_exactly(client, len(expected)) == expected
        hub.publish(EPOCH, [delta("3-0")])  # up to date again: written by the hub, no task
        assert len(asyncio.all_tasks() - before) == 0
        client.close()
        transport.close()
        hub.close()

    run_on(loop_name, main)
