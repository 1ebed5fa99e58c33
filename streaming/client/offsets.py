"""Offsets and frontiers, for read-your-writes. A publish answers each event's offset
``Offset(partition, id)``; a view reflects it once its frontier's position for that partition is
at or after ``id``. Positions (``<ms>-<seq>``, or ``<n>`` on a Kafka log) compare as pairs of
numbers, not as strings."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from liveviews.client.frames import ENTRY_ID
from liveviews.client.types import Frontier
from liveviews.log.events import Offset


def entry_tuple(entry_id: str) -> tuple[int, int]:
    if not ENTRY_ID.fullmatch(entry_id):
        raise ValueError(f"{entry_id!r} is not a log position of the form <ms>-<seq> or <n>")
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


def latest_of_each(offsets: Iterable[Offset]) -> list[Offset]:
    """The latest of ``offsets`` in each partition: a frontier that covers it covers the others,
    and a wait names at most 64 offsets."""
    latest: dict[int, Offset] = {}
    for o in offsets:
        have = latest.get(o.partition)
        if have is None or entry_tuple(have.id) < entry_tuple(o.id):
            latest[o.partition] = o
    return list(latest.values())


def parse_offset(offset: Offset | str | Mapping[str, Any]) -> Offset:
    """An offset as publish answered it: an ``Offset``, its token ``"<partition>:<position>"``,
    or ``{"partition", "id"}``."""
    if isinstance(offset, Offset):
        return offset
    if isinstance(offset, str):
        part, _, entry = offset.partition(":")
        if part.isdigit() and ENTRY_ID.fullmatch(entry):
            return Offset(int(part), entry)
    elif isinstance(offset, Mapping):
        partition, given = offset.get("partition"), offset.get("id")
        if isinstance(partition, int) and isinstance(given, str) and ENTRY_ID.fullmatch(given):
            return Offset(partition, given)
    raise ValueError(f"{offset!r} is not an offset: give what publish answered")


def covers(frontier: Frontier, offsets: Iterable[Offset]) -> bool:
    """Whether ``frontier`` is at or after every one of ``offsets``."""
    for o in offsets:
        have = frontier.get(str(o.partition))
        if have is None or entry_tuple(have) < entry_tuple(o.id):
            return False
    return True


def merge_frontier(older: Frontier, newer: Mapping[str, str]) -> Frontier:
    """The later entry id of each partition: a frontier never moves back within one epoch."""
    out = dict(older)
    for partition, entry in newer.items():
        if partition not in out or entry_tuple(out[partition]) < entry_tuple(entry):
            out[partition] = entry
    return out
