"""RFC 6455 framing for the WebSockets the gateway serves itself once the handshake is done.

The handshake (HTTP/1.1 Upgrade) is uvicorn's; afterwards an open socket owns its connection
(``liveviews.gateway.live.sockets``) and this module is its wire format: server frames are written
unmasked and unfragmented; client frames are parsed incrementally by a ``Reader``, which enforces
what the RFC requires of a client (every frame masked, no reserved bits, since no extension is
negotiated on an owned socket, control frames short and unfragmented, continuations only
within a fragmented message), the gateway's message size limit, checked on each frame's
header before its payload is read, and at most ``MAX_FRAGMENTS`` frames per message. A
violation raises ``ProtocolError`` with the close code to answer.

Why not the ``websockets`` package's sans-I/O codec, which uvicorn uses for the handshake:
every WebSocket delivery frames a message, and ``python -m bench.floor`` measures its framing of
a delta-sized message at about five times this module's (0.73 µs against 0.14 on the reference
machine), its parsing of a client message slower by a third or more, and of 6-byte frames about
seven times slower (docs/performance/websocket-codec.md). An owned socket needs none of what it
adds: no extension is negotiated on it, and the ticker keeps its ping and close deadlines."""

from __future__ import annotations

import struct
from typing import NamedTuple

OP_CONTINUATION = 0x0
OP_TEXT = 0x1
OP_BINARY = 0x2
OP_CLOSE = 0x8
OP_PING = 0x9
OP_PONG = 0xA

CLOSE_NORMAL = 1000
CLOSE_PROTOCOL_ERROR = 1002
CLOSE_NO_STATUS = 1005
CLOSE_INVALID_DATA = 1007
CLOSE_POLICY = 1008
CLOSE_TOO_BIG = 1009
CLOSE_INTERNAL_ERROR = 1011

_DATA = (OP_TEXT, OP_BINARY)
_CONTROL = (OP_CLOSE, OP_PING, OP_PONG)
_MAX_CONTROL = 125


class ProtocolError(Exception):
    """The client broke the protocol; close the socket with ``code``."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


class Message(NamedTuple):
    """A complete message or control frame: its opcode and (unmasked) payload."""

    opcode: int
    data: bytes


def frame(opcode: int, payload: bytes) -> bytes:
    """One final, unmasked frame, as a server sends it."""
    n = len(payload)
    if n < 126:
        head = struct.pack("!BB", 0x80 | opcode, n)
    elif n < 65536:
        head = struct.pack("!BBH", 0x80 | opcode, 126, n)
    else:
        head = struct.pack("!BBQ", 0x80 | opcode, 127, n)
    return head + payload


def text(payload: bytes) -> bytes:
    """A text message; ``payload`` is UTF-8 (every gateway message is JSON)."""
    return frame(OP_TEXT, payload)


def close(code: int, reason: str = "") -> bytes:
    body = struct.pack("!H", code) + reason.encode()[: _MAX_CONTROL - 2]
    return frame(OP_CLOSE, body)


def close_code(payload: bytes) -> int:
    """The status code of a close frame's payload (1005 when it has none)."""
    if len(payload) < 2:
        return CLOSE_NO_STATUS
    return int(struct.unpack("!H", payload[:2])[0])


def unmask(mask: bytes | bytearray, payload: bytes | bytearray) -> bytes:
    n = len(payload)
    if not n:
        return bytes(payload)
    key = int.from_bytes((mask * (n // 4 + 1))[:n], "little")
    return (int.from_bytes(payload, "little") ^ key).to_bytes(n, "little")


MAX_FRAGMENTS = 1024
"""Frames one message may arrive in. Browsers send each message as one frame; without a bound,
empty continuation frames, which add nothing to count against the size limit, would each cost
a parse for as long as a peer kept sending them."""


class Reader:
    """Client frames in, complete messages and control frames out.

    An idle reader holds no buffer; bytes wait in one only while a frame is incomplete (or
    ``feed`` stopped at its limit), and a fragmented message's payload only until its last
    frame. ``feed`` may be told to parse at most so many frames: a peer that sends a stream of
    tiny frames then gets a bounded share of the event loop per call, and ``backlog`` says that
    complete frames may still wait.
    """

    __slots__ = ("max_size", "backlog", "_buffer", "_parts", "_opcode", "_fragments")

    def __init__(self, max_size: int) -> None:
        self.max_size = max_size
        self.backlog = False
        """``feed`` stopped at its limit with bytes left: call it again (with ``b""``)."""
        self._buffer: bytearray | None = None
        self._parts: bytearray | None = None
        self._opcode = 0
        self._fragments = 0

    @property
    def idle(self) -> bool:
        """Between messages: no partial frame or fragmented message held."""
        return self._buffer is None and self._parts is None

    def feed(self, data: bytes, limit: int = 0) -> list[Message]:
        """The messages and control frames completed by ``data``, in order; at most ``limit``
        frames are parsed if ``limit`` is set, the rest wait (``backlog``)."""
        buf: bytes | bytearray
        if self._buffer is None:
            buf = data
        else:
            buf = self._buffer
            buf += data
        out: list[Message] = []
        emit = out.append
        n = len(buf)
        pos = 0
        left = limit or -1
        try:
            # One loop with everything inlined: per frame this is the whole cost of a peer's
            # 6-byte frames, so it avoids a call and a copy wherever it can.
            while left and n - pos >= 2:
                b0 = buf[pos]
                b1 = buf[pos + 1]
                if b0 & 0x70:
                    raise ProtocolError(CLOSE_PROTOCOL_ERROR, "reserved bits set")
                if not b1 & 0x80:
                    raise ProtocolError(CLOSE_PROTOCOL_ERROR, "client frames must be masked")
                opcode = b0 & 0x0F
                length = b1 & 0x7F
                head = pos + 2
                if length > 125:
                    if length == 126:
                        head = pos + 4
                        if n < head:
                            break
                        length = int.from_bytes(buf[pos + 2 : head], "big")
                    else:
                        head = pos + 10
                        if n < head:
                            break
                        length = int.from_bytes(buf[pos + 2 : head], "big")
                if opcode & 0x08:
                    if opcode > OP_PONG:
                        raise ProtocolError(CLOSE_PROTOCOL_ERROR, f"unknown opcode {opcode}")
                    if length > _MAX_CONTROL or not b0 & 0x80:
                        raise ProtocolError(CLOSE_PROTOCOL_ERROR, "invalid control frame")
                elif opcode == OP_CONTINUATION:
                    if self._parts is None:
                        raise ProtocolError(CLOSE_PROTOCOL_ERROR, "unexpected continuation frame")
                    if len(self._parts) + length > self.max_size:
                        raise ProtocolError(CLOSE_TOO_BIG, "message too big")
                    if self._fragments >= MAX_FRAGMENTS:
                        raise ProtocolError(CLOSE_TOO_BIG, "message in too many fragments")
                elif opcode <= OP_BINARY:
                    if self._parts is not None:
                        raise ProtocolError(CLOSE_PROTOCOL_ERROR, "expected a continuation frame")
                    if length > self.max_size:
                        raise ProtocolError(CLOSE_TOO_BIG, "message too big")
                else:
                    raise ProtocolError(CLOSE_PROTOCOL_ERROR, f"unknown opcode {opcode}")
                end = head + 4 + length
                if end > n:
                    break
                payload = unmask(buf[head : head + 4], buf[head + 4 : end]) if length else b""
                pos = end
                left -= 1
                if opcode & 0x08:
                    emit(Message(opcode, payload))
                elif b0 & 0x80:
                    if opcode == OP_CONTINUATION:
                        assert self._parts is not None
                        self._parts += payload
                        payload, self._parts = bytes(self._parts), None
                        opcode = self._opcode
                    emit(self._message(opcode, payload))
                elif opcode == OP_CONTINUATION:
                    assert self._parts is not None
                    self._parts += payload
                    self._fragments += 1
                else:
                    self._parts, self._opcode, self._fragments = bytearray(payload), opcode, 1
        finally:
            self.backlog = not left and n - pos >= 2
            if pos == n:
                self._buffer = None
            elif isinstance(buf, bytearray):
                del buf[:pos]
                self._buffer = buf
            else:
                self._buffer = bytearray(memoryview(buf)[pos:])
        return out

    @staticmethod
    def _message(opcode: int, payload: bytes) -> Message:
        if opcode == OP_TEXT:
            try:
                payload.decode()
            except UnicodeDecodeError:
                raise ProtocolError(CLOSE_INVALID_DATA, "invalid UTF-8 in a text message") from None
        return Message(opcode, payload)
