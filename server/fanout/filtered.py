"""A prefix subscription with a filter on its rows (docs/PROTOCOL.md, section 5.2).

It keeps the rows it sent (``held``): a row change that matches is passed on as an upsert, and
one of a held row that no longer matches becomes a delete (a move-out); a change to a row it
does not hold and that does not match is not sent at all, so a subscriber learns nothing of
rows outside its filter while it is connected.

A resume cannot know which rows the client held from the log alone (a delta carries a row's new
value, not its old one), so it compares with the view now, as a window's resume does: a row
that did not change since the id's position matched then as it matches now, and is held; each
row that changed is sent as it is now, or deleted.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from liveviews.changes.topic import shard_for, split_physical
from liveviews.gateway.fanout.items import FeedDelta
from liveviews.gateway.fanout.query import PrefixSubscription, follow
from liveviews.gateway.fanout.subscription import MAX_HISTORY_PAGE, Source, replaced
from liveviews.gateway.feed.queries import Reads, read_prefix
from liveviews.gateway.feed.store import HistoryGone, read_shard_history
from liveviews.gateway.wire import frames
from liveviews.gateway.wire.eventid import MAX_PART, PrefixId, position_tuple
from liveviews.gateway.wire.filters import Filter

Position = tuple[int, int]


class FilteredPrefixSubscription(PrefixSubscription):
    """The rows that match ``filter`` of the keys of ``view`` that start with ``prefix`` and
    that ``readable`` lets the subscriber read."""

    __slots__ = ("filter", "held", "settled")

    def __init__(
        self,
        source: Source,
        reads: Reads,
        view: str,
        prefix: str,
        readable: Callable[[str], bool],
        resume: PrefixId | None,
        filter: Filter,
    ) -> None:
        super().__init__(source, reads, view, prefix, readable, resume)
        self.filter = filter
        self.held: dict[str, set[str]] = {}
        """Key -> the rows of it the client holds."""
        self.settled = False
        """Do ``held`` and the positions say what the client holds once it has taken what it
        was handed? Not while a snapshot or a resume is being read."""

    def _attach(self) -> None:
        super()._attach()
        assert self.subscriber is not None
        self.subscriber.wants = self._wants

    def _wants(self, items: list[FeedDelta]) -> bool:
        """Are a key's deltas of one read anything to this subscriber (``Subscriber.wants``)?
        When it has taken everything it was handed, deltas that change none of its rows are
        taken here, at once, as ``_take`` would take them (its positions move, nothing is
        sent): its sender is not woken for them, nor owed a frontier. Otherwise, yes."""
        sub = self.subscriber
        if not self.settled or sub is None or sub.buffer or self.history is not None:
            return True
        delta = items[0].delta
        if self.readable(delta.key):
            held = self.held.get(delta.key)
            matches = self.filter.matches
            for item in items:
                if item.epoch != self.epoch:
                    return True  # the subscription's reset decides what it means
                for op in item.delta.ops:
                    # ``_ops``' rule for what is sent, inlined on this path, where the hub asks
                    # once per subscriber per key changed.
                    if (held is not None and op["row"] in held) or (
                        op["op"] == "upsert" and matches(op["value"])
                    ):
                        return True  # an old position among them is ``_take``'s to skip
        elif any(item.epoch != self.epoch for item in items):
            return True
        shard = shard_for(delta.view, delta.key, self.shards)
        for item in items:
            if item.position > self.positions[shard]:
                self.positions[shard] = item.position
        return False

    async def _snapshot(self) -> frames.Frame:
        self.settled = False
        frame = await super()._snapshot()
        self.settled = True
        return frame

    def _event_id(self) -> str:
        positions = tuple(f"{ms}-{seq}" for ms, seq in self.positions)
        return str(PrefixId(self.epoch, positions, self.filter.digest))

    async def _first(self) -> list[frames.Frame]:
        resume = self.shard_resume
        if resume is None:
            return [await self._snapshot()]
        if resume.filter != self.filter.digest:
            return await self._reset(
                "unknown_position",
                "cannot resume: the id is of a subscription with another filter, or none; "
                "here is a snapshot with this one.",
            )
        return await self._catch_up_filtered(resume)

    def _visible(self, keys: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        matches = self.filter.matches
        visible: dict[str, dict[str, Any]] = {}
        for key, rows in keys.items():
            if self.readable(key):
                kept = {row: value for row, value in rows.items() if matches(value)}
                if kept:
                    visible[key] = kept
        self.held = {key: set(rows) for key, rows in visible.items()}
        return visible

    def _ops(self, key: str, ops: list[dict[str, Any]]) -> list[dict[str, Any]]:
        matches = self.filter.matches
        held = self.held.get(key)
        out: list[dict[str, Any]] = []
        for op in ops:
            row = op["row"]
            if op["op"] == "upsert" and matches(op["value"]):
                if held is None:
                    held = self.held[key] = set()
                held.add(row)
                out.append(op)
            elif held is not None and row in held:
                held.discard(row)
                out.append(op if op["op"] == "delete" else {"op": "delete", "row": row})
        if held is not None and not held:
            del self.held[key]
        return out

    async def _catch_up_filtered(self, resume: PrefixId) -> list[frames.Frame]:
        """The view now against what the client held at ``resume``: for each key with rows
        that changed since, one delta, in the order of the key's first change in its shard."""
        self.settled = False
        out = await self._catch_up_rows(resume)
        self.settled = True
        return out

    async def _catch_up_rows(self, resume: PrefixId) -> list[frames.Frame]:
        s = self.source
        snap = await read_prefix(
            s.client, self.reads, s.layout, self.view, self.key, s.frontier_of(self.view)
        )
        now = [position_tuple(p) for p in snap.positions]
        try:
            changed = [
                await self._changed(
                    shard, resume.epoch, position_tuple(resume.positions[shard]), now[shard]
                )  # fmt: skip
                for shard in range(self.shards)
            ]
        except HistoryGone as gone:
            return await self._reset(gone.code, f"cannot resume: {gone.message}")
        if snap.around.epoch != resume.epoch:
            # The version changed between the reads: what the client holds is gone.
            return await self._reset(*replaced(resume.epoch, snap.around.epoch))
        follow(self, snap.around)
        self.positions = [position_tuple(p) for p in resume.positions]
        self._visible(snap.keys)
        matches = self.filter.matches
        out: list[frames.Frame] = []
        for shard, keys in enumerate(changed):
            # A frame's id covers its key's changes and every position before the next key's
            # first change: a resume from it sends each later key whole, and again at most
            # the keys whose rows changed after it (sent as they are then, so no harm).
            sent = sorted(
                ((first, key, rows) for key, (first, rows) in keys.items() if self.readable(key))
            )
            for i, (_, key, rows) in enumerate(sent):
                self.positions[shard] = before(sent[i + 1][0]) if i + 1 < len(sent) else now[shard]
                now_rows = snap.keys.get(key, {})
                ops: list[dict[str, Any]] = []
                for row in sorted(rows):
                    value = now_rows.get(row)
                    if row in now_rows and matches(value):
                        ops.append({"op": "upsert", "row": row, "value": value})
                    else:
                        ops.append({"op": "delete", "row": row})
                out.append(frames.delta(self.view, key, ops, self._event_id()))
            self.positions[shard] = now[shard]
        if out:
            self.last_event_id = out[-1].id
        return out

    async def _changed(
        self, shard: int, epoch: str, after: Position, until: Position
    ) -> dict[str, tuple[Position, set[str]]]:
        """Key -> its first change after ``after`` (to ``until``) and the rows that changed."""
        s = self.source
        prefix = self.key.encode()
        changed: dict[str, tuple[Position, set[str]]] = {}
        start = "{}-{}".format(*after)
        while after < until:
            page = await read_shard_history(
                s.client, s.layout, shard, self.view, epoch, start, MAX_HISTORY_PAGE,
                split_physical(s.frontier_of(self.view))[0], lambda key: key.startswith(prefix),
            )  # fmt: skip
            for delta in page.deltas:
                at = position_tuple(delta.id)
                if at > until:
                    break
                _, rows = changed.setdefault(delta.key, (at, set()))
                rows.update(op["row"] for op in delta.ops)
            read_to = position_tuple(page.read_to)
            if page.complete or read_to >= until or read_to <= after:
                break
            after, start = read_to, page.read_to
        return changed


def before(position: Position) -> Position:
    """The position just before ``position`` in a stream's order."""
    ms, seq = position
    return (ms, seq - 1) if seq > 0 else (ms - 1, MAX_PART)
