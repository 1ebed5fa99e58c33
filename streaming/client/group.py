"""A group of key subscriptions released together (docs/PROTOCOL.md, section 5.3):
``client.group([(view, key), ...])``. A page, a report or a test never sees one of them reflect
a write that another does not reflect yet: the gateway sends the members' frames only at
positions of the log every member reflects, in one ``group`` frame, which this applies whole.

``members`` lists each member's ``view``, ``key`` and ``rows``, in the order given. The iterator
yields a ``Change`` per group frame: ``snapshot`` for the first, ``delta`` for each later one,
with ``contents`` mapping each member's index to its rows. ``reflects(offsets)`` returns once
every member reflects them. Over WebSocket it resumes each member from the last id of its own
frames; over SSE, where the group is one stream (``sse.group_path``), from the group frame's id,
which holds them all.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from liveviews.client.errors import ProtocolError
from liveviews.client.frames import Frame, GroupFrame
from liveviews.client.query import Query, parse_query
from liveviews.client.subscription import Change, Owner, Subscription, SubscriptionState
from liveviews.client.types import Rows

MAX_MEMBERS = 16


@dataclass
class Member:
    """One (view, key) of a group, and its rows as of the group's latest frame."""

    view: str
    key: str
    _rows: Rows = field(default_factory=dict, repr=False)
    last_event_id: str | None = None

    @property
    def rows(self) -> Mapping[str, Any]:
        return MappingProxyType(self._rows)


def parse_members(members: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    """The members an application gave, checked: 1 to 16 (view, key) pairs."""
    listed = list(members)
    if not 1 <= len(listed) <= MAX_MEMBERS:
        raise ValueError(f"a group is a list of 1 to {MAX_MEMBERS} (view, key) pairs")
    out = []
    for member in listed:
        if not isinstance(member, tuple) or len(member) != 2:
            raise ValueError(f"a group's member is a (view, key) pair, not {member!r}")
        query = parse_query(*member)
        assert query.key is not None
        out.append((query.view, query.key))
    return out


class Group(Subscription):
    """Several keys followed as one. Made by ``client.group``."""

    def __init__(self, owner: Owner, members: Sequence[tuple[str, str]]) -> None:
        self._given = list(members)
        view, key = self._given[0]
        super().__init__(owner, Query("key", view, key=key))

    def _empty(self) -> None:
        self.key = None
        self.members = [Member(view, key) for view, key in self._given]

    def _contents(self) -> Mapping[str, Any]:
        return {str(i): dict(m.rows) for i, m in enumerate(self.members)}

    def _records(self) -> tuple[list[dict[str, Any]], list[str]]:
        records = [{"member": i, "view": m.view, "key": m.key, "row": r,
                    **(v if isinstance(v, dict) else {"value": v})}
                   for i, m in enumerate(self.members) for r, v in m.rows.items()]  # fmt: skip
        return records, ["member", "row"]

    def member_ids(self) -> list[tuple[str, str, str, str | None]]:
        """Each member as its subscribe message names it: (sub, view, key, last event id)."""
        return [(f"m{i}", m.view, m.key, m.last_event_id) for i, m in enumerate(self.members)]

    def _forget_position(self, error: Any) -> None:
        for m in self.members:
            m.last_event_id = None
        super()._forget_position(error)

    def _frame(self, frame: Frame) -> None:
        # Only group frames come to a group; anything else does not fit it.
        if self.active:
            self._owner.detach(self)
            self._fail(ProtocolError(f"a group was sent a {frame.kind} frame on its own"))

    def _group(self, frame: GroupFrame) -> None:
        """Apply a group frame whole: every member's frames, then the common frontier."""
        if not self.active:
            return
        rows = [dict(m.rows) for m in self.members]
        ids = [m.last_event_id for m in self.members]
        reset, snapshots = None, False
        try:
            for member in frame.frames:
                i = int(member.sub[1:]) if member.sub.startswith("m") else -1
                if not 0 <= i < len(rows):
                    raise ProtocolError(f"a group frame names member {member.sub!r}")
                if member.kind == "snapshot":
                    rows[i], snapshots = dict(member.data["rows"]), True
                elif member.kind == "delta":
                    for op in member.data["ops"]:
                        if op["op"] == "upsert":
                            rows[i][op["row"]] = op["value"]
                        else:
                            rows[i].pop(op["row"], None)
                else:
                    reset = member.data.get("code")
                if member.id is not None:
                    ids[i] = member.id
        except (ProtocolError, KeyError, TypeError, ValueError) as exc:
            self._owner.detach(self)
            error = exc if isinstance(exc, ProtocolError) else ProtocolError(f"bad frame: {exc!r}")
            self._fail(error)
            return
        for m, new, at in zip(self.members, rows, ids, strict=True):
            m._rows, m.last_event_id = new, at
        self.frontier = dict(frame.frontier)
        self.last_event_id = frame.id
        # A member's snapshot replaces its rows: the group's contents start over from it.
        first = not self._had_snapshot or reset is not None or snapshots
        was_recovering, self._had_snapshot = self._had_snapshot, True
        contents, at = self._contents(), frame.id or ""
        if first:
            self._push(Change("snapshot", at, None, (), contents, was_recovering, reset))
        else:
            self._push(Change("delta", at, None, (), contents))
        self._set_state(SubscriptionState.LIVE)
        self._settle_waiters()
