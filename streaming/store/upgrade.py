"""Moves a store written by an earlier release to the current key names, once.

Earlier releases named the keys every process shares without a hash tag (``lv:frontier``,
``lv:progress``, ``lv:meta``, ...). Now the keys that one script or transaction touches share
one (``lv:{m}:...``, ``lv:{d}:...``), so that a store cluster holds them in one slot. A store
of an earlier release is a single server, where a rename is one atomic command: each process
that opens the store renames what is still under an old name before it reads anything, so a
running installation keeps its epoch (clients resume), its versions and its frontiers.
"""

from __future__ import annotations

from typing import Any

from liveviews.store.client import is_cluster

RENAMES = {
    "lv:meta": "lv:{m}:meta",
    "lv:frontier": "lv:{m}:frontier",
    "lv:frontier:batches": "lv:{m}:frontier:batches",
    "lv:frontier:lag": "lv:{m}:frontier:lag",
    "lv:progress": "lv:{m}:progress",
    "lv:active": "lv:{m}:active",
    "lv:versions": "lv:{m}:versions",
    "lv:versions:code": "lv:{m}:versions:code",
    "lv:deadletters": "lv:{d}:deadletters",
}
PATTERNS = {"lv:history:*": "lv:{m}:history:", "lv:deadletters:*": "lv:{d}:deadletters:"}
"""Old keys found by pattern, and the prefix that replaces the part before ``*``."""

# Renames each old key that exists to its new name unless the new one exists already (then a
# process of this release wrote it first, and the old one is left for an operator).
# KEYS: old, new, old, new, ... Returns the number renamed.
SCRIPT = """
local moved = 0
for i = 1, #KEYS, 2 do
  if redis.call('EXISTS', KEYS[i]) == 1 and redis.call('EXISTS', KEYS[i + 1]) == 0 then
    redis.call('RENAME', KEYS[i], KEYS[i + 1])
    moved = moved + 1
  end
end
return moved
"""


def pairs_to_move(found: dict[str, list[str]]) -> list[str]:
    """``KEYS`` for ``SCRIPT``: the fixed pairs, and one pair per key ``found`` by pattern."""
    keys: list[str] = []
    for old, new in RENAMES.items():
        keys += [old, new]
    for pattern, names in found.items():
        prefix = pattern[:-1]
        for name in names:
            keys += [name, PATTERNS[pattern] + name[len(prefix) :]]
    return keys


def upgrade(client: Any) -> int:
    """Rename a single server's keys of an earlier release (sync client); 0 on a cluster."""
    if is_cluster(client):
        return 0
    found = {
        pattern: [k.decode() for k in client.scan_iter(match=pattern, count=1000)]
        for pattern in PATTERNS
    }
    keys = pairs_to_move(found)
    return int(client.eval(SCRIPT, len(keys), *keys))


async def upgrade_async(client: Any) -> int:
    """``upgrade`` with an asyncio client (the gateway)."""
    if is_cluster(client):
        return 0
    found = {
        pattern: [k.decode() async for k in client.scan_iter(match=pattern, count=1000)]
        for pattern in PATTERNS
    }
    keys = pairs_to_move(found)
    return int(await client.eval(SCRIPT, len(keys), *keys))
