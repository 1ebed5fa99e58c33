"""Query-shaped subscriptions: the keys of a view with a prefix, and a window of a key's rows in
score order (docs/PROTOCOL.md, section 5.1), with the promises of a key's subscription.

Both are attached to the hub before they read the store, as a key's subscription is, and take
the hub's items from their buffer: their frames are their own (a prefix's ids carry a position
per shard; a window's deltas are the changes of its rows), so the hub never writes the key's
shared frames to them.

- ``PrefixSubscription`` passes on each delta of a key it watches, with an id that holds the
  position of every shard: a delta is next if it is after the position of its shard. A resume
  reads each shard's missed deltas in turn, a page at a time.
- ``WindowSubscription`` reads its window again when a delta of its key comes, and sends what
  changed in it. Its id holds the window's last row, so a resume knows which rows the client
  held: the rows it holds that did not change since are exactly those of the key ranked from
  the window's start to that row.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from liveviews.changes.topic import shard_for, split_physical
from liveviews.gateway.fanout.items import FeedDelta, Item
from liveviews.gateway.fanout.subscription import MAX_HISTORY_PAGE, Source, Subscription, replaced
from liveviews.gateway.feed.queries import (
    Around,
    Rank,
    Reads,
    WindowRead,
    WindowRow,
    read_prefix,
    read_window,
)
from liveviews.gateway.feed.store import HistoryGone, read_history, read_shard_history
from liveviews.gateway.wire import frames
from liveviews.gateway.wire.eventid import PrefixId, WindowId, position_tuple


class PrefixSubscription(Subscription):
    """Every key of ``view`` that starts with ``prefix`` and that ``readable`` lets the
    subscriber read (the empty prefix: the whole view)."""

    __slots__ = ("reads", "readable", "positions", "shard_resume", "shards")

    direct = False

    def __init__(
        self,
        source: Source,
        reads: Reads,
        view: str,
        prefix: str,
        readable: Callable[[str], bool],
        resume: PrefixId | None,
    ) -> None:
        super().__init__(source, view, prefix, None)
        self.reads = reads
        self.readable = readable
        self.shards = source.layout.shards
        self.positions = [(0, 0)] * self.shards
        self.shard_resume = resume
        self.last_event_id = str(resume) if resume else None

    @property
    def prefix(self) -> str:
        return self.key

    def _attach(self) -> None:
        self.subscriber = self.source.hub.attach_prefix(self.view, self.key, self.source.buffer)

    def _event_id(self) -> str:
        return str(PrefixId(self.epoch, tuple(f"{ms}-{seq}" for ms, seq in self.positions)))

    async def _first(self) -> list[frames.Frame]:
        if self.shard_resume is None:
            return [await self._snapshot()]
        self.epoch = self.shard_resume.epoch
        self.positions = [position_tuple(p) for p in self.shard_resume.positions]
        self.history = "0"
        return await self._history_page()

    async def _snapshot(self) -> frames.Frame:
        s = self.source
        snap = await read_prefix(
            s.client, self.reads, s.layout, self.view, self.key, s.frontier_of(self.view)
        )
        around = snap.around
        follow(self, around)
        self.positions = [position_tuple(p) for p in snap.positions]
        keys = self._visible(snap.keys)
        event_id = self._event_id()
        self.last_event_id = event_id
        return frames.prefix_snapshot(
            self.view, self.key, keys, around.frontier, event_id, lag_ms=around.lag_ms
        )

    def _visible(self, keys: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        """What the subscriber may see of a snapshot's keys: those the read rule lets it read."""
        return {k: rows for k, rows in keys.items() if self.readable(k)}

    def _ops(self, key: str, ops: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """What the subscriber is sent of a delta of a key it may read: all of it."""
        return ops

    async def _history_page(self) -> list[frames.Frame]:
        """The next page of the deltas missed in the shard ``history`` names; the shards are
        read in turn, and live deltas wait in the buffer until the last is read."""
        s = self.source
        assert self.history is not None
        shard = int(self.history)
        after = "{}-{}".format(*self.positions[shard])
        prefix = self.key.encode()
        try:
            page = await read_shard_history(
                s.client, s.layout, shard, self.view, self.epoch, after,
                min(s.buffer, MAX_HISTORY_PAGE), split_physical(s.frontier_of(self.view))[0],
                lambda key: key.startswith(prefix),
            )  # fmt: skip
        except HistoryGone as gone:
            self.history = None
            return await self._reset(gone.code, f"cannot resume: {gone.message}")
        out = []
        for delta in page.deltas:
            self.positions[shard] = position_tuple(delta.id)
            if self.readable(delta.key):
                event_id = self._event_id()
                out.append(frames.delta(delta.view, delta.key, delta.ops, event_id))
        self.positions[shard] = position_tuple(page.read_to)
        if page.complete:
            if shard + 1 < self.shards:
                self.history = str(shard + 1)
            else:
                self.history = None
                self.progress_position = position_tuple(page.progress)
        if out:
            self.last_event_id = out[-1].id
        return out

    def _take(self, item: FeedDelta) -> frames.Frame | None:
        """The frame of a live delta, if it is next for its shard and readable."""
        delta = item.delta
        shard = shard_for(delta.view, delta.key, self.shards)
        if item.epoch != self.epoch or item.position <= self.positions[shard]:
            return None
        self.positions[shard] = item.position
        if not self.readable(delta.key):
            return None
        ops = self._ops(delta.key, delta.ops)
        if not ops:
            return None
        return frames.delta(delta.view, delta.key, ops, self._event_id())


class WindowSubscription(Subscription):
    """The ``limit`` rows of (``view``, ``key``) of highest score, or those after the row
    ``after``: a page of the key in its view's order."""

    __slots__ = ("reads", "view_limit", "limit", "after", "window", "window_resume", "moved")

    direct = False

    def __init__(
        self,
        source: Source,
        reads: Reads,
        view: str,
        key: str,
        *,
        view_limit: int,
        limit: int,
        after: Rank | None,
        resume: WindowId | None,
    ) -> None:
        super().__init__(source, view, key, None)
        self.reads = reads
        self.view_limit = view_limit
        self.limit = limit
        self.after = after
        self.window: dict[str, WindowRow] = {}
        """The rows the client holds, as it was sent them, in order."""
        self.window_resume = resume
        self.last_event_id = str(resume) if resume else None
        self.moved = False
        """Did a delta of the key come among the items being taken (``_frames_of``)?"""

    def _attach(self) -> None:
        self.subscriber = self.source.hub.attach(
            self.view, self.key, self.source.buffer, shared=False
        )

    def _boundary(self) -> Rank | None:
        """The window's last row, when it is full: the rows after it are not the client's."""
        if len(self.window) < self.limit:
            return None
        last = next(reversed(self.window.values()))
        return last.score, last.row

    def _event_id(self) -> str:
        return str(WindowId(self.epoch, "{}-{}".format(*self.position), self._boundary()))

    async def _read(self, until: Rank | None | bool = False) -> WindowRead:
        s = self.source
        return await read_window(
            s.client, self.reads, s.layout, self.view, self.key, s.frontier_of(self.view),
            view_limit=self.view_limit, limit=self.limit, after=self.after, until=until,
        )  # fmt: skip

    async def _first(self) -> list[frames.Frame]:
        if self.window_resume is None:
            return [await self._snapshot()]
        return await self._resume(self.window_resume)

    async def _snapshot(self) -> frames.Frame:
        read = await self._read()
        around = read.around
        follow(self, around)
        self.position = position_tuple(read.position)
        self.window = {r.row: r for r in read.rows}
        event_id = self._event_id()
        self.last_event_id = event_id
        return frames.window_snapshot(
            self.view, self.key, self.limit,
            {r.row: orjson.loads(r.value) for r in read.rows},
            {r.row: r.score for r in read.rows},
            around.frontier, event_id, lag_ms=around.lag_ms,
        )  # fmt: skip

    async def _resume(self, resume: WindowId) -> list[frames.Frame]:
        """What changed in the window since ``resume``: the window now, against the rows the
        client holds. Those that did not change since are the key's rows ranked from the
        window's start to its last row then (all the rows after its start, if it was not
        full); a row that changed is sent as it is now, or deleted if it is not in the
        window now."""
        s = self.source
        boundary = resume.boundary
        read = await self._read(until=boundary if boundary is not None else True)
        changed: set[str] = set()
        after = resume.position
        while True:
            try:
                page = await read_history(
                    s.client, s.layout, self.view, self.key, resume.epoch, after,
                    count=MAX_HISTORY_PAGE, pipeline=split_physical(s.frontier_of(self.view))[0],
                )  # fmt: skip
            except HistoryGone as gone:
                return await self._reset(gone.code, f"cannot resume: {gone.message}")
            if read.around.epoch != resume.epoch:
                # The version changed between the two reads: what the client holds is gone.
                return await self._reset(*replaced(resume.epoch, read.around.epoch))
            limit = position_tuple(read.position)
            for delta in page.deltas:
                if position_tuple(delta.id) <= limit:
                    changed.update(op["row"] for op in delta.ops)
            if page.complete or position_tuple(page.read_to) >= limit:
                break
            after = page.read_to
        follow(self, read.around)
        self.position = position_tuple(read.position)

        def held(rank: Rank) -> bool:
            return boundary is None or rank >= boundary  # ranked no later than the boundary

        ops: list[dict[str, object]] = []
        for row in read.rows:
            if row.row in changed or not held((row.score, row.row)):
                ops.append(_upsert(row))
        # The rows after the window now, down to its last row then, left it (they are never in
        # it); so did every row that changed and is not in it now.
        beyond = [row_id for _, row_id in read.beyond]
        ops += [{"op": "delete", "row": row_id} for row_id in beyond]
        now = {row.row for row in read.rows}
        for row_id in sorted(changed - now - set(beyond)):
            ops.append({"op": "delete", "row": row_id})
        self.window = {r.row: r for r in read.rows}
        if not ops:
            self.last_event_id = str(resume)
            return []
        frame = frames.window_delta(self.view, self.key, ops, self._event_id())
        self.last_event_id = frame.id
        return [frame]

    async def _changes(self) -> frames.Frame | None:
        """The window read again: a delta of what changed in it since it was last sent."""
        read = await self._read()
        if read.around.epoch != self.epoch:
            return None  # the feed's notice of the new version resets the subscription
        self.position = max(self.position, position_tuple(read.position))
        ops: list[dict[str, object]] = []
        now = {r.row: r for r in read.rows}
        for row in read.rows:
            sent = self.window.get(row.row)
            if sent is None or sent.value != row.value or sent.score != row.score:
                ops.append(_upsert(row))
        for row_id in self.window:
            if row_id not in now:
                ops.append({"op": "delete", "row": row_id})
        self.window = now
        if not ops:
            return None
        return frames.window_delta(self.view, self.key, ops, self._event_id())

    def _take(self, item: FeedDelta) -> frames.Frame | None:
        """A delta of the key: the window is read again once the items at hand are seen."""
        if item.epoch == self.epoch and item.position > self.position:
            self.moved = True
        return None

    async def _frames_of(self, items: list[Item]) -> list[frames.Frame]:
        self.moved = False
        out = await super()._frames_of(items)
        if self.moved:
            frame = await self._changes()
            if frame is not None:
                out.append(frame)
        return out


def follow(sub: Subscription, around: Around) -> None:
    """``sub`` is at the epoch and frontier a read of the store saw."""
    sub.epoch = around.epoch
    sub.progress_position = position_tuple(around.progress)
    sub.frontier = frames.progress(around.frontier).data.decode()


def _upsert(row: WindowRow) -> dict[str, object]:
    return {"op": "upsert", "row": row.row, "value": orjson.loads(row.value), "score": row.score}
