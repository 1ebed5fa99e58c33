"""RFC 6455 framing for the WebSockets the gateway serves itself once the handshake is done.

The handshake (HTTP/1.1 Upgrade) is uvicorn's; afterwards an open socket owns its connection
(``server.live.sockets``) and this module is its wire format: server frames are written unmasked
and unfragmented; client frames are parsed incrementally by a ``Reader``, which enforces what
the RFC requires of a client (every frame masked, no reserved bits, since no extension is
negotiated on an owned socket, control frames short and unfragmented, continuations only
within a fragmented message) and the gateway's message size limit, checked on each frame's
header before its payload is read. A violation raises ``ProtocolError`` with the close code to
answer.

Why not the ``websockets`` package's sans-I/O codec, which uvicorn uses for the handshake:
every WebSocket delivery frames a message, and ``python -m bench.floor`` measures its framing of
a delta-sized message at about five times this module's (0.73 µs against 0.14 on the reference
machine), its parsing of a client message slower by a third or more, and of 6-byte frames about
three times slower (docs/performance/websocket-codec.md). An owned socket needs none of what it
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


def unmask(mask: bytes, payload: bytes) -> bytes:
    n = len(payload)
    if not n:
        return payload
    key = int.from_bytes((mask * (n // 4 + 1))[:n], "little")
    return (int.from_bytes(payload, "little") ^ key).to_bytes(n, "little")


class Reader:
    """Client frames in, complete messages and control frames out.

    An idle reader holds no buffer; bytes wait in one only while a frame is incomplete, and a
    fragmented message's parts only until its last one.
    """

    __slots__ = ("max_size", "_buffer", "_parts", "_opcode", "_size")

    def __init__(self, max_size: int) -> None:
        self.max_size = max_size
        self._buffer: bytearray | None = None
        self._parts: list[bytes] | None = None
        self._opcode = 0
        self._size = 0

    @property
    def idle(self) -> bool:
        """Between messages: no partial frame or fragmented message held."""
        return self._buffer is None and self._parts is None

    def feed(self, data: bytes) -> list[Message]:
        buf = self._buffer
        if buf is None:
            buf = bytearray(data)
        else:
            buf += data
        out: list[Message] = []
        pos = 0
        try:
            while True:
                got = self._next(buf, pos, out)
                if got is None:
                    break
                pos = got
        finally:
            if pos:
                del buf[:pos]
            self._buffer = buf if buf else None
        return out

    def _next(self, buf: bytearray, pos: int, out: list[Message]) -> int | None:
        """Parse one frame at ``pos``: its end, or None if it is not complete yet."""
        avail = len(buf) - pos
        if avail < 2:
            return None
        b0, b1 = buf[pos], buf[pos + 1]
        fin, opcode, length = b0 & 0x80, b0 & 0x0F, b1 & 0x7F
        if b0 & 0x70:
            raise ProtocolError(CLOSE_PROTOCOL_ERROR, "reserved bits set")
        if not b1 & 0x80:
            raise ProtocolError(CLOSE_PROTOCOL_ERROR, "client frames must be masked")
        head = 2
        if length == 126:
            head = 4
            if avail < head:
                return None
            length = int.from_bytes(buf[pos + 2 : pos + 4], "big")
        elif length == 127:
            head = 10
            if avail < head:
                return None
            length = int.from_bytes(buf[pos + 2 : pos + 10], "big")
        if opcode in _CONTROL:
            if length > _MAX_CONTROL or not fin:
                raise ProtocolError(CLOSE_PROTOCOL_ERROR, "invalid control frame")
        elif opcode in _DATA:
            if self._parts is not None:
                raise ProtocolError(CLOSE_PROTOCOL_ERROR, "expected a continuation frame")
            if length > self.max_size:
                raise ProtocolError(CLOSE_TOO_BIG, "message too big")
        elif opcode == OP_CONTINUATION:
            if self._parts is None:
                raise ProtocolError(CLOSE_PROTOCOL_ERROR, "unexpected continuation frame")
            if self._size + length > self.max_size:
                raise ProtocolError(CLOSE_TOO_BIG, "message too big")
        else:
            raise ProtocolError(CLOSE_PROTOCOL_ERROR, f"unknown opcode {opcode}")
        end = pos + head + 4 + length
        if len(buf) < end:
            return None
        mask = bytes(buf[pos + head : pos + head + 4])
        payload = unmask(mask, bytes(buf[pos + head + 4 : end]))
        if opcode in _CONTROL:
            out.append(Message(opcode, payload))
        elif opcode != OP_CONTINUATION and fin:
            out.append(self._message(opcode, payload))
        else:
            if opcode != OP_CONTINUATION:
                self._parts, self._opcode, self._size = [], opcode, 0
            assert self._parts is not None
            self._parts.append(payload)
            self._size += length
            if fin:
                whole = b"".join(self._parts)
                self._parts, self._size = None, 0
                out.append(self._message(self._opcode, whole))
        return end

    @staticmethod
    def _message(opcode: int, payload: bytes) -> Message:
        if opcode == OP_TEXT:
            try:
                payload.decode()
            except UnicodeDecodeError:
                raise ProtocolError(CLOSE_INVALID_DATA, "invalid UTF-8 in a text message") from None
        return Message(opcode, payload)
