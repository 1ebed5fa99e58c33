"""The change feed's wait and its transaction in one round trip, on a single store server.

The store serves a connection's commands in order, and a blocked command holds back those
behind it. So the feed writes its blocking ``XREAD`` and the ``MULTI`` that reads the change
topic together: the transaction runs as soon as the wait ends (an entry came, or its time is
up), from the positions the wait had, and stays the one consistent cut the feed hands out; the
wait's own entries are dropped. One round trip per batch instead of two.

redis-py's pipelines cannot put a blocking command before a ``MULTI``, so this writes the
commands on one of its connections and shapes the raw replies itself. It also skips the
pipeline's Python, which with the wait's was a fifth of the gateway's CPU at 100 batches/s in
the spread fan-out benchmark (docs/performance/fanout.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

Command = tuple[Any, ...]


async def transact(
    client: Any, transaction: Sequence[Command], *, wait: Command | None = None
) -> list[Any]:
    """The raw replies of ``transaction``, run in a ``MULTI`` (once ``wait`` is answered).

    A connection that fails, times out or is cancelled halfway is closed, never handed back
    with replies unread. Errors the store answers inside the transaction are raised."""
    pool = client.connection_pool
    conn = await pool.get_connection()
    commands = [*([wait] if wait else []), ("MULTI",), *transaction, ("EXEC",)]
    try:
        await conn.send_packed_command(conn.pack_commands(commands))
        for _ in commands[:-1]:
            await conn.read_response()  # the wait's entries, OK, then QUEUED for each command
        replies = await conn.read_response()
    except BaseException:
        await conn.disconnect()
        raise
    finally:
        await pool.release(conn)
    for reply in replies:
        if isinstance(reply, Exception):
            raise reply
    return list(replies)


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
