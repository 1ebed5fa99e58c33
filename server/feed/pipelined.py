"""The change feed's wait and its transaction in one round trip, on a single store server.

The store serves a connection's commands in order, and a blocked command holds back those
behind it. So the feed writes its blocking ``XREAD`` and the ``MULTI`` that reads the change
topic together: the transaction runs as soon as the wait ends (an entry came, or its time is
up), from the positions the wait had, and stays the one consistent cut the feed hands out; the
wait's own entries are dropped. One round trip per batch instead of two.

The feed owns one connection for this, opened by redis-py (so TLS, AUTH, ``HELLO`` and
``SELECT`` are its), and then writes and reads it itself: commands packed here, replies parsed
by hiredis. redis-py's pipelines cannot put a blocking command before a ``MULTI``, and its path
for each command and reply (packing, pool, timeouts, events) cost ~270 µs of CPU per batch
against ~60 µs this way, which at 100 batches/s was a third of the gateway's CPU when each
batch reaches a few subscribers (docs/performance/fanout.md, "The feed's own connection").
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import hiredis
from redis.exceptions import ConnectionError as StoreConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as StoreTimeoutError

Command = tuple[Any, ...]

READ_SIZE = 1 << 16
_MORE = object()
"""What the parser returns when a reply is not complete yet (a reply may itself be ``False``)."""


_BULKS: dict[Any, bytes] = {}
"""Arguments packed before: stream names, command names and the layout's script come back in
every batch (a fifth of a batch's CPU was their encoding). Cleared when full, as positions do
not come back."""
_MAX_BULKS = 4096


def pack(commands: Sequence[Command]) -> bytes:
    """``commands`` in RESP, each argument (``str``, ``bytes`` or ``int``) a bulk string."""
    out: list[bytes] = []
    for command in commands:
        out.append(b"*%d\r\n" % len(command))
        for arg in command:
            bulk = _BULKS.get(arg)
            if bulk is None:
                bulk = _bulk(arg)
                if len(_BULKS) >= _MAX_BULKS:
                    _BULKS.clear()
                _BULKS[arg] = bulk
            out.append(bulk)
    return b"".join(out)


def _bulk(arg: Any) -> bytes:
    if isinstance(arg, str):
        raw = arg.encode()
    elif isinstance(arg, bytes):
        raw = arg
    elif isinstance(arg, int) and not isinstance(arg, bool):
        raw = b"%d" % arg
    else:
        raise TypeError(f"a store command's argument must be str, bytes or int, not {arg!r}")
    return b"$%d\r\n%s\r\n" % (len(raw), raw)


class FeedConnection:
    """One connection of ``client``'s pool, held for the change feed's transactions.

    A transaction that fails halfway, times out or is cancelled closes the connection, never
    reading behind replies it left unread; the next transaction opens another. Errors the
    store answers are raised once every reply is read, so the connection stays in step."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self._conn: Any = None
        self._parser: Any = None

    async def transact(
        self, transaction: Sequence[Command], *, wait: Command | None = None
    ) -> list[Any]:
        """The raw replies of ``transaction``, run in a ``MULTI`` (once ``wait`` is answered)."""
        commands = [*([wait] if wait else []), ("MULTI",), *transaction, ("EXEC",)]
        try:
            conn = self._conn or await self._open()
            conn._writer.write(pack(commands))
            async with asyncio.timeout(conn.socket_timeout):
                replies = await self._replies(conn._reader, len(commands))
        except TimeoutError as exc:
            await self.close()
            raise StoreTimeoutError("the store did not answer the change feed in time") from exc
        except BaseException:
            await self.close()
            raise
        *before, results = replies
        for reply in [*before, *(results if isinstance(results, list) else [results])]:
            if isinstance(reply, Exception):
                raise reply
        return list(results)

    async def _open(self) -> Any:
        conn = await self.client.connection_pool.get_connection()
        self._parser = hiredis.Reader(notEnoughData=_MORE, replyError=ResponseError)
        self._conn = conn
        return conn

    async def _replies(self, reader: asyncio.StreamReader, count: int) -> list[Any]:
        replies: list[Any] = []
        while len(replies) < count:
            reply = self._parser.gets()
            if reply is _MORE:
                data = await reader.read(READ_SIZE)
                if not data:
                    raise StoreConnectionError("the store closed the change feed's connection")
                self._parser.feed(data)
            else:
                replies.append(reply)
        return replies

    async def close(self) -> None:
        """Close the connection (a transaction after this opens another)."""
        conn, self._conn, self._parser = self._conn, None, None
        if conn is not None:
            try:
                await conn.disconnect()
            finally:
                await self.client.connection_pool.release(conn)


def hash_of(raw: Any) -> dict[bytes, bytes]:
    """An ``HGETALL`` reply as a dict, from a RESP3 map or a RESP2 flat list."""
    if isinstance(raw, dict):
        return raw
    return dict(zip(raw[::2], raw[1::2], strict=True))


def streams_of(raw: Any) -> list[list[Any]]:
    """An ``XREAD`` reply as redis-py shapes it, ``[[stream, [(id, {field: value})]]]``, from
    a RESP3 map or a RESP2 list (``None``: nothing new)."""
    if not raw:
        return []
    pairs = raw.items() if isinstance(raw, dict) else raw
    return [[name, [(entry_id, hash_of(fields)) for entry_id, fields in entries]]
            for name, entries in pairs]  # fmt: skip
