"""A replaced pipeline version's state, deleted once its grace period is over.

Everything the version wrote goes: its views' rows and positions, its batches, its frontier
and history, and its checkpoint; on a store cluster, from every primary. Its dead letters stay,
as a record. ``liveviews.pipeline.versioning`` calls it, in a thread, ``LV_REBUILD_GRACE_SECONDS``
after the switch.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from typing import Any

from redis.cluster import RedisCluster

from liveviews.changes.topic import (
    FRONTIER_BATCHES_KEY,
    FRONTIER_KEY,
    FRONTIER_LAG_KEY,
    batches_key,
    history_stream,
    positions_key,
)
from liveviews.pipeline.queries import checkpoint_of
from liveviews.pipeline.settings import Settings
from liveviews.pipeline.versions import Version
from liveviews.store.client import Client

DELETE_STEP = 1000


def delete_state(client: Client, settings: Settings, p: str, old: Version, views: set[str]) -> None:
    """Everything a pipeline version wrote: its views' rows, their positions, its batches, its
    frontier and history, and its checkpoint. Its dead letters stay, as a record."""
    qualified = old.qualified(p)
    for view in sorted(views):
        name = view + old.namespace
        batch: list[Any] = []
        for key in _scan(client, f"lv:{{c*}}:*:{_glob(name)}/*"):
            batch.append(key)
            if len(batch) >= DELETE_STEP:
                _unlink(client, batch)
                batch = []
        if batch:
            _unlink(client, batch)
        for shard in range(settings.change_shards):
            fields = [f for f, _ in client.hscan_iter(
                positions_key(shard), match=f"{_glob(name)}/*", count=DELETE_STEP)]  # fmt: skip
            for i in range(0, len(fields), DELETE_STEP):
                client.hdel(positions_key(shard), *fields[i : i + DELETE_STEP])
    with client.pipeline(transaction=False) as pipe:
        for shard in range(settings.change_shards):
            pipe.hdel(batches_key(shard), qualified)
        for key in (FRONTIER_KEY, FRONTIER_BATCHES_KEY, FRONTIER_LAG_KEY):
            pipe.hdel(key, qualified)
        pipe.delete(history_stream(qualified))
        pipe.execute()
    shutil.rmtree(checkpoint_of(settings, qualified), ignore_errors=True)


def _scan(client: Client, pattern: str) -> Iterator[Any]:
    """The keys matching ``pattern``: on a store cluster, on every primary."""
    if isinstance(client, RedisCluster):
        return client.scan_iter(
            match=pattern, count=DELETE_STEP, target_nodes=RedisCluster.PRIMARIES
        )
    return client.scan_iter(match=pattern, count=DELETE_STEP)


def _unlink(client: Client, keys: list[Any]) -> None:
    """One UNLINK for ``keys`` on a single server; on a store cluster, one per slot (a
    command's keys must share one), sent together in one pipeline."""
    if not isinstance(client, RedisCluster):
        client.unlink(*keys)
        return
    by_slot: dict[int, list[Any]] = {}
    for key in keys:
        by_slot.setdefault(client.keyslot(key), []).append(key)
    with client.pipeline(transaction=False) as pipe:
        for same_slot in by_slot.values():
            pipe.execute_command("UNLINK", *same_slot)  # its unlink() takes one key only
        pipe.execute()


def _glob(text: str) -> str:
    """``text`` as a literal in a store MATCH pattern."""
    return "".join(f"\\{c}" if c in "*?[]\\" else c for c in text)
