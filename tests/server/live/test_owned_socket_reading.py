"""What an owned WebSocket (``liveviews.gateway.live.sockets.OwnedSocket``) reads in one turn of the loop.

Bug: the socket parsed and acted on every frame of a read at once, answering each ping with its
own write. A client sending a stream of 6-byte frames held the event loop, and with it every
other subscriber of the process, for as long as a 256 kB read took: ~43,000 frames and as many
system calls. Fix: one turn of the loop handles a bounded number of frames, the rest wait with
reading paused, and one pong answers the latest of a turn's pings (RFC 6455 5.5.3).

Run on real loopback TCP connections under both event loops the gateway can serve on.
"""

from __future__ import annotations

import asyncio
import os

import pytest
from websockets.frames import Frame, Opcode

from liveviews.gateway.live.sockets import OwnedSocket
from tests.support.sockets import LOOPS, connected_pair, run_on

FRAMES = 60_000


class Turns:
    """Counts the turns of the loop, and which turn each message was handed over in."""

    def __init__(self) -> None:
        self.turn = 0
        self.per_turn: dict[int, int] = {}
        self.messages = 0

    async def count(self) -> None:
        while True:
            self.turn += 1
            await asyncio.sleep(0)

    def received(self, data: bytes) -> None:
        self.messages += 1
        self.per_turn[self.turn] = self.per_turn.get(self.turn, 0) + 1

    def gone(self) -> None:
        pass


def tiny(opcode: Opcode, payload: bytes = b"") -> bytes:
    return Frame(opcode, payload).serialize(mask=True)


@pytest.mark.parametrize("loop_name", sorted(LOOPS))
def test_a_stream_of_tiny_frames_gets_a_bounded_share_of_each_turn(loop_name: str) -> None:
    async def main() -> None:
        transport, client = await connected_pair()
        turns = Turns()
        sock = OwnedSocket(transport, set(), 1 << 20, 0.0, 10.0, 10.0, 0.0)
        sock.handler = turns
        transport.set_protocol(sock)
        counting = asyncio.create_task(turns.count())
        # Empty text messages and empty pings, 6 bytes each, as fast as the client can send.
        flood = (tiny(Opcode.TEXT) + tiny(Opcode.PING)) * (FRAMES // 2)
        await asyncio.to_thread(client.sendall, flood)
        async with asyncio.timeout(30):
            while turns.messages < FRAMES // 2:
                await asyncio.sleep(0.01)
        counting.cancel()
        client.setblocking(False)
        pongs = b""
        try:
            while chunk := client.recv(1 << 20):
                pongs += chunk
        except BlockingIOError:
            pass
        # Every message got through, a few hundred frames at most per turn of the loop.
        assert max(turns.per_turn.values()) <= 512, max(turns.per_turn.values())
        # One 2-byte pong per batch of pings, not one per ping.
        assert 0 < len(pongs) // 2 <= FRAMES // 256, len(pongs) // 2
        client.close()
        transport.close()

    run_on(loop_name, main)


@pytest.mark.parametrize("loop_name", sorted(LOOPS))
def test_frames_wait_unread_while_the_handler_hears_nothing(loop_name: str) -> None:
    """A handler that paused reading gets no message until it resumes, however many the last
    read brought, and then every one of them in order."""

    async def main() -> None:
        transport, client = await connected_pair()
        got: list[bytes] = []

        class Pausing:
            def received(self, data: bytes) -> None:
                got.append(data)
                if len(got) == 3:
                    sock.pause_reading()

            def gone(self) -> None:
                pass

        sock = OwnedSocket(transport, set(), 1 << 20, 0.0, 10.0, 10.0, 0.0)
        sock.handler = Pausing()
        transport.set_protocol(sock)
        payloads = [b"%d" % i + os.urandom(4).hex().encode() for i in range(2_000)]
        await asyncio.to_thread(client.sendall, b"".join(tiny(Opcode.TEXT, p) for p in payloads))
        async with asyncio.timeout(10):
            while len(got) < 3:
                await asyncio.sleep(0.01)
        await asyncio.sleep(0.2)
        assert len(got) <= 512  # what the turn that paused it had parsed already
        held = len(got)
        await asyncio.sleep(0.2)
        assert len(got) == held
        sock.resume_reading()
        async with asyncio.timeout(10):
            while len(got) < len(payloads):
                await asyncio.sleep(0.01)
        assert got == payloads
        client.close()
        transport.close()

    run_on(loop_name, main)
