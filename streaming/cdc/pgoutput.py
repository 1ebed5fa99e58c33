"""PostgreSQL's ``pgoutput`` logical replication messages, decoded: the one reader of them.

Protocol version 1, values in text format (the plugin's default), as the PostgreSQL manual's
"Logical Replication Message Formats" describes them. Pure: bytes in, a message out.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Literal

PG_EPOCH_MS = 946_684_800_000
"""PostgreSQL counts time from 2000-01-01 UTC; the log counts from 1970."""

Kind = Literal["n", "u", "t"]
"""A column's value in a tuple: null, unchanged TOAST (not sent), or text."""


@dataclass(frozen=True)
class Column:
    name: str
    type_oid: int
    type_modifier: int
    is_key: bool
    """Part of the replica identity (the primary key, unless another is set)."""


@dataclass(frozen=True)
class Begin:
    final_lsn: int
    commit_time_ms: int
    xid: int


@dataclass(frozen=True)
class Commit:
    flags: int
    commit_lsn: int
    end_lsn: int
    commit_time_ms: int


@dataclass(frozen=True)
class Origin:
    commit_lsn: int
    name: str


@dataclass(frozen=True)
class Relation:
    relation_id: int
    namespace: str
    name: str
    replica_identity: str
    """``d`` default (the primary key), ``n`` nothing, ``f`` full (every column), ``i`` index."""
    columns: tuple[Column, ...]


@dataclass(frozen=True)
class Type:
    type_oid: int
    namespace: str
    name: str


Tuple = tuple[tuple[Kind, str | None], ...]
"""One row: per column of its relation, the kind and, for ``t``, the text value."""


@dataclass(frozen=True)
class Insert:
    relation_id: int
    new: Tuple


@dataclass(frozen=True)
class Update:
    relation_id: int
    old: Tuple | None
    """The old row's key columns (``K``) or whole row (``O``, replica identity full); None when
    the key did not change and the table does not send old rows."""
    old_is_key: bool
    new: Tuple


@dataclass(frozen=True)
class Delete:
    relation_id: int
    old: Tuple
    old_is_key: bool


@dataclass(frozen=True)
class Truncate:
    options: int
    relation_ids: tuple[int, ...]


@dataclass(frozen=True)
class Unknown:
    """A message this reader does not need (logical decoding messages, streaming)."""

    tag: str


Message = Begin | Commit | Origin | Relation | Type | Insert | Update | Delete | Truncate | Unknown


class DecodeError(ValueError):
    """The bytes are not a pgoutput message of protocol version 1."""


def lsn_text(lsn: int) -> str:
    """``0/16B3748``, as PostgreSQL writes a WAL position."""
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


def parse_lsn(text: str) -> int:
    high, sep, low = text.partition("/")
    if not sep:
        raise ValueError(f"{text!r} is not a WAL position such as 0/16B3748")
    return (int(high, 16) << 32) | int(low, 16)


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, fmt: str) -> int:
        size = struct.calcsize(fmt)
        if self.pos + size > len(self.data):
            raise DecodeError(f"message ends at byte {len(self.data)}, inside a field")
        (value,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += size
        return int(value)

    def byte(self) -> str:
        return chr(self.take("!B"))

    def string(self) -> str:
        end = self.data.find(b"\0", self.pos)
        if end < 0:
            raise DecodeError("a string is not terminated")
        text = self.data[self.pos : end].decode()
        self.pos = end + 1
        return text

    def tuple(self) -> Tuple:
        values: list[tuple[Kind, str | None]] = []
        for _ in range(self.take("!h")):
            kind = self.byte()
            if kind == "t":
                size = self.take("!i")
                if self.pos + size > len(self.data):
                    raise DecodeError("a column value runs past the message's end")
                values.append(("t", self.data[self.pos : self.pos + size].decode()))
                self.pos += size
            elif kind in ("n", "u"):
                values.append((kind, None))  # type: ignore[arg-type]  # narrowed above
            else:
                raise DecodeError(f"column kind {kind!r} (binary values are not asked for)")
        return tuple(values)

    def time_ms(self) -> int:
        return self.take("!q") // 1000 + PG_EPOCH_MS


def decode(data: bytes) -> Message:
    """One pgoutput message."""
    if not data:
        raise DecodeError("an empty message")
    r = _Reader(data)
    tag = r.byte()
    if tag == "B":
        return Begin(r.take("!Q"), r.time_ms(), r.take("!I"))
    if tag == "C":
        return Commit(r.take("!B"), r.take("!Q"), r.take("!Q"), r.time_ms())
    if tag == "O":
        return Origin(r.take("!Q"), r.string())
    if tag == "R":
        rel_id, namespace, name, identity = r.take("!I"), r.string(), r.string(), r.byte()
        columns = []
        for _ in range(r.take("!h")):
            flags, col_name = r.take("!B"), r.string()
            columns.append(Column(col_name, r.take("!I"), r.take("!i"), bool(flags & 1)))
        return Relation(rel_id, namespace, name, identity, tuple(columns))
    if tag == "Y":
        return Type(r.take("!I"), r.string(), r.string())
    if tag == "I":
        rel_id = r.take("!I")
        if r.byte() != "N":
            raise DecodeError("an insert without its new row")
        return Insert(rel_id, r.tuple())
    if tag == "U":
        rel_id = r.take("!I")
        part = r.byte()
        old: Tuple | None = None
        old_is_key = False
        if part in ("K", "O"):
            old, old_is_key = r.tuple(), part == "K"
            part = r.byte()
        if part != "N":
            raise DecodeError("an update without its new row")
        return Update(rel_id, old, old_is_key, r.tuple())
    if tag == "D":
        rel_id = r.take("!I")
        part = r.byte()
        if part not in ("K", "O"):
            raise DecodeError("a delete without its old key or row")
        return Delete(rel_id, r.tuple(), part == "K")
    if tag == "T":
        count, options = r.take("!I"), r.take("!B")
        return Truncate(options, tuple(r.take("!I") for _ in range(count)))
    return Unknown(tag)
