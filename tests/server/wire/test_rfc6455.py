"""RFC 6455 framing of owned sockets (``liveviews.gateway.wire.rfc6455``), checked against the ``websockets``
library's own frame codec: what one writes, the other reads."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from websockets.frames import Frame, Opcode
from websockets.streams import StreamReader

from liveviews.gateway.wire import rfc6455


def client_frame(opcode: Opcode, data: bytes, fin: bool = True) -> bytes:
    """A frame as a client sends it: masked."""
    return Frame(opcode, data, fin).serialize(mask=True)


def raw_frame(first_byte: int, data: bytes) -> bytes:
    """A masked frame with any first byte (FIN, reserved bits, opcode), valid or not."""
    mask = os.urandom(4)
    size = bytes([0x80 | len(data)]) if len(data) < 126 else bytes([0x80 | 126]) + len(
        data).to_bytes(2, "big")  # fmt: skip
    return bytes([first_byte]) + size + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data))


def parse_server_frame(raw: bytes) -> Frame:
    reader = StreamReader()
    reader.feed_data(raw)
    parser = Frame.parse(reader.read_exact, mask=False)
    try:
        next(parser)
    except StopIteration as done:
        frame: Frame = done.value
        return frame
    raise AssertionError("incomplete frame")


def feed_in_pieces(reader: rfc6455.Reader, raw: bytes, cuts: list[int]) -> list[rfc6455.Message]:
    out: list[rfc6455.Message] = []
    start = 0
    for cut in sorted(set(c % (len(raw) + 1) for c in cuts)) + [len(raw)]:
        out += reader.feed(raw[start:cut])
        start = cut
    return out


@settings(max_examples=200, deadline=None)
@given(payload=st.binary(max_size=70_000))
def test_a_server_frame_is_read_back_by_websockets(payload: bytes) -> None:
    frame = parse_server_frame(rfc6455.frame(rfc6455.OP_BINARY, payload))
    assert (frame.opcode, frame.fin, frame.data) == (Opcode.BINARY, True, payload)


@settings(max_examples=200, deadline=None)
@given(
    texts=st.lists(st.text(max_size=300), min_size=1, max_size=4),
    parts=st.integers(min_value=1, max_value=4),
    cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=8),
    ping=st.binary(max_size=125),
)
def test_client_frames_are_read_whatever_the_pieces_they_arrive_in(
    texts: list[str], parts: int, cuts: list[int], ping: bytes
) -> None:
    """Messages fragmented in ``parts`` frames with a ping between the first two, delivered in
    arbitrary pieces, come out whole and in order; the ping as soon as it is complete."""
    raw = b""
    expected: list[rfc6455.Message] = []
    for text in texts:
        data = text.encode()
        size = max(1, -(-len(data) // parts))
        chunks = [data[i : i + size] for i in range(0, len(data), size)] or [b""]
        for i, chunk in enumerate(chunks):
            opcode = Opcode.TEXT if i == 0 else Opcode.CONT
            raw += client_frame(opcode, chunk, fin=i == len(chunks) - 1)
            if i == 0 and len(chunks) > 1:
                raw += client_frame(Opcode.PING, ping)
                expected.append(rfc6455.Message(rfc6455.OP_PING, ping))
        expected.append(rfc6455.Message(rfc6455.OP_TEXT, data))
    reader = rfc6455.Reader(max_size=1 << 20)
    assert feed_in_pieces(reader, raw, cuts) == expected
    assert reader.idle


def test_a_close_frame_carries_its_code_and_reason() -> None:
    frame = parse_server_frame(rfc6455.close(4401, "token_expired"))
    assert frame.opcode == Opcode.CLOSE
    assert rfc6455.close_code(frame.data) == 4401 and frame.data[2:] == b"token_expired"
    assert rfc6455.close_code(b"") == rfc6455.CLOSE_NO_STATUS


@pytest.mark.parametrize(
    ("raw", "code"),
    [
        (Frame(Opcode.TEXT, b"hi").serialize(mask=False), rfc6455.CLOSE_PROTOCOL_ERROR),
        (raw_frame(0xC1, b"hi"), rfc6455.CLOSE_PROTOCOL_ERROR),
        (client_frame(Opcode.CONT, b"x"), rfc6455.CLOSE_PROTOCOL_ERROR),
        (client_frame(Opcode.TEXT, b"a", fin=False) + client_frame(Opcode.TEXT, b"b"),
         rfc6455.CLOSE_PROTOCOL_ERROR),
        (raw_frame(0x09, b"x"), rfc6455.CLOSE_PROTOCOL_ERROR),
        (raw_frame(0x89, b"x" * 126), rfc6455.CLOSE_PROTOCOL_ERROR),
        (raw_frame(0x83, b""), rfc6455.CLOSE_PROTOCOL_ERROR),
        (client_frame(Opcode.TEXT, b"\xff\xfe"), rfc6455.CLOSE_INVALID_DATA),
        (client_frame(Opcode.TEXT, b"\xe2\x82", fin=False) + client_frame(Opcode.CONT, b"\xac"),
         None),
        (client_frame(Opcode.TEXT, b"x" * 101), rfc6455.CLOSE_TOO_BIG),
        (client_frame(Opcode.TEXT, b"x" * 60, fin=False) + client_frame(Opcode.CONT, b"x" * 41),
         rfc6455.CLOSE_TOO_BIG),
    ],
    ids=["unmasked", "reserved-bit", "stray-continuation", "interleaved-message",
         "fragmented-control", "long-control", "unknown-opcode", "invalid-utf8",
         "utf8-split-across-fragments", "too-big", "too-big-in-fragments"],
)  # fmt: skip
def test_what_a_client_may_not_send_is_refused_with_its_close_code(
    raw: bytes, code: int | None
) -> None:
    reader = rfc6455.Reader(max_size=100)
    if code is None:
        assert reader.feed(raw) == [rfc6455.Message(rfc6455.OP_TEXT, "€".encode())]
        return
    with pytest.raises(rfc6455.ProtocolError) as refused:
        reader.feed(raw)
    assert refused.value.code == code


def test_a_huge_length_is_refused_from_the_header_alone() -> None:
    """A header announcing 2**40 bytes is refused before any payload arrives."""
    header = bytes([0x81, 0x80 | 127]) + (1 << 40).to_bytes(8, "big")
    with pytest.raises(rfc6455.ProtocolError) as refused:
        rfc6455.Reader(max_size=1 << 20).feed(header)
    assert refused.value.code == rfc6455.CLOSE_TOO_BIG


def test_an_idle_reader_holds_no_buffer() -> None:
    reader = rfc6455.Reader(max_size=100)
    raw = client_frame(Opcode.TEXT, b"hello")
    assert reader.feed(raw[:3]) == [] and not reader.idle
    assert reader.feed(raw[3:]) == [rfc6455.Message(rfc6455.OP_TEXT, b"hello")]
    assert reader.idle


def test_a_message_in_too_many_fragments_is_refused() -> None:
    """Empty continuation frames add nothing to a message's size; each still counts as one of
    the at most ``MAX_FRAGMENTS`` frames a message may arrive in (they grew a list without
    bound before)."""
    first = client_frame(Opcode.TEXT, b"{", fin=False)
    empty = client_frame(Opcode.CONT, b"", fin=False)
    reader = rfc6455.Reader(max_size=1 << 20)
    with pytest.raises(rfc6455.ProtocolError) as refused:
        reader.feed(first + empty * 100_000)
    assert refused.value.code == rfc6455.CLOSE_TOO_BIG
    # A message in as many fragments as allowed still comes out whole.
    reader = rfc6455.Reader(max_size=1 << 20)
    parts = [client_frame(Opcode.CONT, b"", fin=False)] * (rfc6455.MAX_FRAGMENTS - 2)
    raw = first + b"".join(parts) + client_frame(Opcode.CONT, b"}")
    assert reader.feed(raw) == [rfc6455.Message(rfc6455.OP_TEXT, b"{}")]


def test_a_limited_feed_leaves_the_rest_for_the_next_call() -> None:
    pings = [client_frame(Opcode.PING, b"%d" % i) for i in range(10)]
    reader = rfc6455.Reader(max_size=100)
    got = reader.feed(b"".join(pings), limit=4)
    assert [m.data for m in got] == [b"0", b"1", b"2", b"3"] and reader.backlog
    got += reader.feed(b"", limit=4) + reader.feed(b"", limit=4)
    assert [m.data for m in got] == [b"%d" % i for i in range(10)]
    assert not reader.backlog and reader.idle
