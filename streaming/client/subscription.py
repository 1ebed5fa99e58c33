"""One subscription: its state machine, the contents it keeps, and its changes as an async
iterator. The subscriptions to a prefix and to a window (``shapes.py``) are this state machine
too, with their own contents: each shape fills in ``_empty``, ``_apply_snapshot``,
``_apply_delta`` and ``_records``.

States: ``connecting`` (no snapshot yet) -> ``live`` -> ``reconnecting`` (connection lost; it
resumes from ``last_event_id``) -> ``live`` again, or -> ``reset`` (the gateway could not resume:
the contents are dropped and a fresh snapshot follows at once) -> ``live``. ``closed``
(unsubscribed, or the client closed) and ``error`` (refused for good, e.g. ``forbidden``) are
final. Every transition goes through ``_set_state``.
"""

from __future__ import annotations

import asyncio
import collections
import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal, Protocol

from liveviews.client.errors import ClientStateError, LiveviewsClientError, ProtocolError
from liveviews.client.frames import Frame, snapshot_shape
from liveviews.client.offsets import covers, merge_frontier, parse_offset
from liveviews.client.query import Query
from liveviews.client.types import Frontier, Json, Rows
from liveviews.log.events import Offset

if TYPE_CHECKING:
    import pandas

MAX_QUEUED = 10_000
"""Changes an iterator may fall behind by. Past that its queue is replaced by one snapshot of the
current contents, so memory stays bounded when nobody iterates (a script that reads
``sub.rows`` only)."""


class SubscriptionState(enum.StrEnum):
    CONNECTING = "connecting"
    LIVE = "live"
    RECONNECTING = "reconnecting"
    RESET = "reset"
    CLOSED = "closed"
    ERROR = "error"


S = SubscriptionState


@dataclass(frozen=True)
class Change:
    """One step of a subscription, as the iterator yields it.

    A ``snapshot`` replaces the contents: ``contents`` holds them (rows, or a prefix's keys);
    ``was_recovering`` is true when it starts over after a resume failed, with the reset's code
    as ``reason``. A ``delta`` is applied in order: ``ops`` of the key ``key``.
    """

    kind: Literal["snapshot", "delta"]
    event_id: str
    key: str | None = None
    ops: tuple[dict[str, Json], ...] = ()
    contents: Mapping[str, Any] = field(default_factory=dict)
    was_recovering: bool = False
    reason: str | None = None


class Owner(Protocol):
    """What a subscription asks of the connection that carries it."""

    def detach(self, sub: Subscription) -> None: ...

    def wait(self, sub: Subscription, offsets: list[Offset]) -> None: ...


class Subscription:
    """A subscription to one key: ``rows`` maps row id -> value. Made by ``client.subscribe``."""

    def __init__(self, owner: Owner, query: Query) -> None:
        self._owner = owner
        self.query = query
        self.view = query.view
        self.state = S.CONNECTING
        self.frontier: Frontier = {}
        self.lag_ms: int | None = None
        """Ms the view was behind the log at the latest frontier (0: caught up); None: unknown."""
        self.last_event_id: str | None = None
        """The id of the last snapshot or delta: where a resume starts. Opaque."""
        self.error: LiveviewsClientError | None = None
        self.reset: dict[str, str] | None = None
        """The latest reset's ``{code, message}`` while a fresh snapshot is awaited."""
        self._had_snapshot = False
        self._queue: collections.deque[Change] = collections.deque()
        self._wake = asyncio.Event()
        self._waiters: list[tuple[list[Offset], asyncio.Future[None]]] = []
        self._empty()

    # ---- the contents of a key: each shape overrides these --------------------------------

    def _empty(self) -> None:
        self.key = self.query.key
        self._rows: Rows = {}

    @property
    def rows(self) -> Mapping[str, Json]:
        """The rows now, read-only: row id -> value."""
        return MappingProxyType(self._rows)

    def _apply_snapshot(self, data: dict[str, Any]) -> Mapping[str, Any]:
        self._rows = dict(data["rows"])
        return dict(self._rows)

    def _apply_delta(self, data: dict[str, Any]) -> None:
        for op in data["ops"]:
            if op["op"] == "upsert":
                self._rows[op["row"]] = op["value"]
            else:
                self._rows.pop(op["row"], None)

    def _contents(self) -> Mapping[str, Any]:
        return dict(self._rows)

    def _records(self) -> tuple[list[dict[str, Any]], list[str]]:
        """The contents as table records, and the columns that index them."""
        return [_record({"row": r}, v) for r, v in self._rows.items()], ["row"]

    # ---- for applications ------------------------------------------------------------------

    @property
    def active(self) -> bool:
        """Whether it may still receive frames (not closed, not failed)."""
        return self.state not in (S.CLOSED, S.ERROR)

    def unsubscribe(self) -> None:
        """Stop receiving; the final state is ``closed``. Calling it again does nothing."""
        if self.active:
            self._owner.detach(self)
            self._finish(S.CLOSED, None)

    async def ready(self) -> Subscription:
        """Once the first snapshot is in; raises the subscription's error if it fails first."""
        while not self._had_snapshot:
            if not self.active:
                raise self.error or ClientStateError("the subscription closed before its snapshot")
            self._wake.clear()
            await self._wake.wait()
        return self

    async def reflects(self, offsets: Offset | str | Iterable[Offset | str]) -> None:
        """Returns once this view reflects every one of ``offsets`` (what publish answered): its
        frontier reached them, and every delta they caused here has been applied. The gateway
        is asked to send that frontier at once: over a WebSocket with a ``wait`` message, over
        SSE with a ``POST /v1/streams/{id}/wait`` naming the subscription's stream. A wait that
        is lost (over SSE its POST failed) is answered by the gateway's progress rhythm, later."""
        many = [offsets] if isinstance(offsets, Offset | str) else list(offsets)
        wanted = [parse_offset(o) for o in many]
        if covers(self.frontier, wanted):
            return
        if not self.active:
            raise self.error or ClientStateError("the subscription is closed")
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((wanted, future))
        self._owner.wait(self, wanted)
        try:
            await future
        finally:
            self._waiters = [w for w in self._waiters if w[1] is not future]

    def to_pandas(self) -> pandas.DataFrame:
        """The contents now as a DataFrame: one line per row, a dict value spread over columns."""
        from liveviews.client.dataframe import frame_of

        records, index = self._records()
        return frame_of(records, index)

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> Change:
        """The next snapshot or delta; ends when the subscription closes, raises if it fails."""
        while not self._queue:
            if not self.active:
                if self.error is not None:
                    raise self.error
                raise StopAsyncIteration
            self._wake.clear()
            await self._wake.wait()
        return self._queue.popleft()

    # ---- what the connection calls -----------------------------------------------------------

    def _waiting_for(self) -> list[list[Offset]]:
        """The offsets of each pending ``reflects``, to ask for again on a new socket."""
        return [wanted for wanted, _ in self._waiters]

    def _open(self) -> None:
        """The connection (re)subscribed it on the gateway."""
        if self.state == S.RECONNECTING:
            self._set_state(S.LIVE)

    def _lost(self) -> None:
        """The connection was lost; it resumes from ``last_event_id``."""
        if self.state in (S.LIVE, S.RESET):
            self._set_state(S.RECONNECTING)

    def _fail(self, error: LiveviewsClientError) -> None:
        """Refused for good."""
        if self.active:
            self.error = error
            self._finish(S.ERROR, error)

    def _close(self) -> None:
        if self.active:
            self._finish(S.CLOSED, None)

    def _forget_position(self, error: LiveviewsClientError) -> None:
        """Its position was refused as malformed: start over with a fresh snapshot."""
        self.last_event_id = None
        if self._had_snapshot:
            self._drop_contents(error.code, error.message)

    def _frame(self, frame: Frame) -> None:
        if not self.active:
            return  # a frame of a connection torn down since
        try:
            self._dispatch(frame)
        except (ProtocolError, KeyError, TypeError) as exc:
            # A frame that does not fit this query: its contents can no longer be trusted.
            self._owner.detach(self)
            error = exc if isinstance(exc, ProtocolError) else ProtocolError(f"bad frame: {exc!r}")
            self._fail(error)

    def _dispatch(self, frame: Frame) -> None:
        if frame.kind == "snapshot":
            self._snapshot(frame)
        elif frame.kind == "delta":
            self._delta(frame)
        elif frame.kind == "progress":
            self.frontier = merge_frontier(self.frontier, frame.data["frontier"])
            self.lag_ms = frame.data.get("lag_ms")
            self._settle_waiters()
        elif frame.kind == "reset":
            self._drop_contents(frame.data["code"], frame.data["message"])
        # end is the connection's; newer kinds are passed over

    def _drop_contents(self, code: str, message: str) -> None:
        self.reset = {"code": code, "message": message}
        self._empty()
        self._set_state(S.RESET)

    def _snapshot(self, frame: Frame) -> None:
        shape = snapshot_shape(frame.data)
        if shape != self.query.shape:
            raise ProtocolError(f"a subscription to a {self.query.shape} got a {shape}'s snapshot")
        assert frame.id is not None
        contents = self._apply_snapshot(frame.data)
        was_recovering, reason = self._had_snapshot, (self.reset or {}).get("code")
        self._had_snapshot, self.reset = True, None
        self.frontier = dict(frame.data["frontier"])
        self.lag_ms = frame.data.get("lag_ms")
        self.last_event_id = frame.id
        self._push(Change("snapshot", frame.id, self.key, (), contents, was_recovering, reason))
        self._set_state(S.LIVE)
        self._settle_waiters()

    def _delta(self, frame: Frame) -> None:
        assert frame.id is not None
        self._apply_delta(frame.data)
        self.last_event_id = frame.id
        self._set_state(S.LIVE)
        self._push(Change("delta", frame.id, frame.data["key"], tuple(frame.data["ops"])))

    def _push(self, change: Change) -> None:
        if len(self._queue) >= MAX_QUEUED:
            self._queue.clear()
            assert self.last_event_id is not None
            change = Change(
                "snapshot",
                self.last_event_id,
                self.key,
                (),
                self._contents(),
                True,
                "iterator_behind",
            )
        self._queue.append(change)
        self._wake.set()

    def _settle_waiters(self) -> None:
        for wanted, future in self._waiters:
            if not future.done() and covers(self.frontier, wanted):
                future.set_result(None)

    def _finish(self, state: SubscriptionState, error: LiveviewsClientError | None) -> None:
        self._set_state(state)
        for _, future in self._waiters:
            if not future.done():
                future.set_exception(error or ClientStateError("the subscription closed"))
        self._wake.set()

    def _set_state(self, state: SubscriptionState) -> None:
        self.state = state
        self._wake.set()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.query} {self.state}>"


def _record(index: dict[str, Any], value: Json) -> dict[str, Any]:
    return {**index, **value} if isinstance(value, dict) else {**index, "value": value}
