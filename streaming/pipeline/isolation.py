"""A view's code that raises on an event sets that event aside instead of stopping the pipeline.

``isolated(processor)`` wraps a ``transformWithState`` processor. Each call of the processor
(one grouping key, one micro-batch) runs on the key's events in log order, with every state
write held back; when it returns, the writes are kept. When it raises, the writes are dropped
and the events are split in two, each half run again on the state the halves before it left,
until each event that raises on its own is found. Those events become dead letters (the
``DEAD_LETTER_VIEW`` rows the sink records with the batch); every other event takes effect as
if the bad ones had never been in the log. The split depends only on the events and the state,
so a micro-batch replayed after a crash sets aside the same events and writes the same rows.

An error of the state store itself (the JVM gone, its socket closed) is not the view's: it is
raised as it is, and ends the query.
"""

from __future__ import annotations

import traceback
from collections.abc import Iterator
from typing import Any

import orjson
from pyspark.sql import Row
from pyspark.sql.streaming.stateful_processor import (
    ExpiredTimerInfo,
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)

from liveviews.errors import ConfigurationError
from liveviews.log.deadletters import MAX_TRACEBACK, STAGE_VIEW
from liveviews.pipeline.views import DEAD_LETTER_VIEW, log_order

_GONE = object()
"""A removed map entry or cleared value in a layer of held-back writes."""


class StateFailure(Exception):
    """The state store failed under a view's code: not the event's fault."""


class _Layer:
    """Writes of one attempt (or of every kept attempt): ``cleared`` hides what is below."""

    __slots__ = ("cleared", "writes")

    def __init__(self) -> None:
        self.cleared = False
        self.writes: dict[Any, Any] = {}

    def merge(self, above: _Layer) -> None:
        if above.cleared:
            self.cleared = True
            self.writes = {}
        self.writes.update(above.writes)


class _Held:
    """A state variable with its writes held back in two layers over the store."""

    def __init__(self, handle: BufferedHandle, state: Any) -> None:
        self.handle = handle
        self.state = state
        self.kept = _Layer()
        self.pending = _Layer()

    def _lookup(self, key: Any, below: Any) -> Any:
        for layer in (self.pending, self.kept):
            if key in layer.writes:
                value = layer.writes[key]
                return None if value is _GONE else value
            if layer.cleared:
                return None
        return self.handle.call(below)

    def keep(self) -> None:
        self.kept.merge(self.pending)
        self.pending = _Layer()

    def discard(self) -> None:
        self.pending = _Layer()

    def flush(self) -> None:
        raise NotImplementedError


class HeldMap(_Held):
    def getValue(self, key: tuple[Any, ...]) -> tuple[Any, ...] | None:
        return self._lookup(tuple(key), lambda: self.state.getValue(key))  # type: ignore[no-any-return]

    def containsKey(self, key: tuple[Any, ...]) -> bool:
        return self.getValue(key) is not None

    def updateValue(self, key: tuple[Any, ...], value: tuple[Any, ...]) -> None:
        self.pending.writes[tuple(key)] = tuple(value)

    def removeKey(self, key: tuple[Any, ...]) -> None:
        self.pending.writes[tuple(key)] = _GONE

    def clear(self) -> None:
        self.pending = _Layer()
        self.pending.cleared = True

    def iterator(self) -> Iterator[tuple[tuple[Any, ...], tuple[Any, ...]]]:
        merged: dict[Any, Any] = {}
        if not (self.kept.cleared or self.pending.cleared):
            merged = {tuple(k): v for k, v in self.handle.call(lambda: list(self.state.iterator()))}
        for layer in (self.kept, self.pending):
            if layer.cleared:
                merged = {}
            merged.update(layer.writes)
        return iter([(k, v) for k, v in merged.items() if v is not _GONE])

    def keys(self) -> Iterator[tuple[Any, ...]]:
        return iter([k for k, _ in self.iterator()])

    def values(self) -> Iterator[tuple[Any, ...]]:
        return iter([v for _, v in self.iterator()])

    def exists(self) -> bool:
        return any(True for _ in self.iterator())

    def flush(self) -> None:
        if self.kept.cleared:
            self.state.clear()
        for key, value in self.kept.writes.items():
            if value is _GONE:
                self.state.removeKey(key)
            else:
                self.state.updateValue(key, value)
        self.kept = _Layer()


class HeldValue(_Held):
    _KEY = "value"

    def get(self) -> tuple[Any, ...] | None:
        return self._lookup(self._KEY, self.state.get)  # type: ignore[no-any-return]

    def exists(self) -> bool:
        return self.get() is not None

    def update(self, value: tuple[Any, ...]) -> None:
        self.pending.writes[self._KEY] = tuple(value)

    def clear(self) -> None:
        self.pending.writes[self._KEY] = _GONE

    def flush(self) -> None:
        if self._KEY in self.kept.writes:
            value = self.kept.writes[self._KEY]
            if value is _GONE:
                self.state.clear()
            else:
                self.state.update(value)
        self.kept = _Layer()


class HeldList(_Held):
    _KEY = "list"

    def get(self) -> Iterator[tuple[Any, ...]]:
        found = self._lookup(self._KEY, lambda: list(self.state.get()))
        return iter(list(found or []))

    def exists(self) -> bool:
        return any(True for _ in self.get())

    def put(self, values: list[tuple[Any, ...]]) -> None:
        self.pending.writes[self._KEY] = [tuple(v) for v in values]

    def appendValue(self, value: tuple[Any, ...]) -> None:
        self.put([*self.get(), value])

    def appendList(self, values: list[tuple[Any, ...]]) -> None:
        self.put([*self.get(), *values])

    def clear(self) -> None:
        self.pending.writes[self._KEY] = []

    def flush(self) -> None:
        if self._KEY in self.kept.writes:
            values = self.kept.writes[self._KEY]
            if values:
                self.state.put(values)
            else:
                self.state.clear()
        self.kept = _Layer()


class BufferedHandle:
    """The processor's handle, with its state variables and timers held back."""

    def __init__(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.states: list[_Held] = []
        self.kept_timers: list[tuple[str, int]] = []
        self.pending_timers: list[tuple[str, int]] = []

    def call(self, fn: Any) -> Any:
        """A read from the state store: its failure is the store's, never the event's."""
        try:
            return fn()
        except Exception as exc:
            raise StateFailure(f"the state store failed: {exc}") from exc

    def _held(self, held: _Held) -> Any:
        self.states.append(held)
        return held

    def getValueState(self, stateName: str, schema: Any, ttlDurationMs: int | None = None) -> Any:
        state = self.handle.getValueState(stateName, schema, ttlDurationMs)
        return self._held(HeldValue(self, state))

    def getListState(self, stateName: str, schema: Any, ttlDurationMs: int | None = None) -> Any:
        state = self.handle.getListState(stateName, schema, ttlDurationMs)
        return self._held(HeldList(self, state))

    def getMapState(
        self, stateName: str, userKeySchema: Any, valueSchema: Any, ttlDurationMs: int | None = None
    ) -> Any:
        state = self.handle.getMapState(stateName, userKeySchema, valueSchema, ttlDurationMs)
        return self._held(HeldMap(self, state))

    def registerTimer(self, expiryTimestampMs: int) -> None:
        self.pending_timers.append(("register", expiryTimestampMs))

    def deleteTimer(self, expiryTimestampMs: int) -> None:
        self.pending_timers.append(("delete", expiryTimestampMs))

    def listTimers(self) -> Iterator[int]:
        timers = set(self.call(lambda: list(self.handle.listTimers())))
        for op, ts in [*self.kept_timers, *self.pending_timers]:
            (timers.add if op == "register" else timers.discard)(ts)
        return iter(sorted(timers))

    def deleteIfExists(self, stateName: str) -> None:
        self.handle.deleteIfExists(stateName)

    def keep(self) -> None:
        for s in self.states:
            s.keep()
        self.kept_timers += self.pending_timers
        self.pending_timers = []

    def discard(self) -> None:
        for s in self.states:
            s.discard()
        self.pending_timers = []

    def flush(self) -> None:
        for s in self.states:
            s.flush()
        for op, ts in self.kept_timers:
            (self.handle.registerTimer if op == "register" else self.handle.deleteTimer)(ts)
        self.kept_timers = []


class IsolatedProcessor(StatefulProcessor):
    """``processor``, with the events it raises on set aside (see the module's docstring)."""

    def __init__(self, processor: StatefulProcessor) -> None:
        self.processor = processor
        self.handle: BufferedHandle | None = None

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = BufferedHandle(handle)
        self.processor.init(self.handle)  # type: ignore[arg-type]

    def handleInputRows(
        self, key: Any, rows: Iterator[Row], timerValues: TimerValues
    ) -> Iterator[Row]:
        assert self.handle is not None
        events = sorted(rows, key=_log_position)
        pieces = list(self._isolate(key, events, timerValues))
        self.handle.flush()
        if len(pieces) == 1:
            yield from pieces[0]
        else:
            yield from _last_write_wins([r for piece in pieces for r in piece])

    def _isolate(self, key: Any, events: list[Row], tv: TimerValues) -> Iterator[list[Row]]:
        """The rows of each kept attempt, in order, and a dead letter for each bad event."""
        done, failure = self._attempt(key, events, tv)
        if failure is None:
            yield done
        elif len(events) == 1:
            yield [_dead_letter(events[0], failure)]
        else:
            half = len(events) // 2
            yield from self._isolate(key, events[:half], tv)
            yield from self._isolate(key, events[half:], tv)

    def _attempt(
        self, key: Any, events: list[Row], tv: TimerValues
    ) -> tuple[list[Row], BaseException | None]:
        assert self.handle is not None
        try:
            rows = list(self.processor.handleInputRows(key, iter(events), tv))
        except (StateFailure, MemoryError):
            raise
        except Exception as exc:  # noqa: BLE001 - whatever the view's code raises
            self.handle.discard()
            return [], exc
        self.handle.keep()
        return rows, None

    def handleExpiredTimer(
        self, key: Any, timerValues: TimerValues, expiredTimerInfo: ExpiredTimerInfo
    ) -> Iterator[Row]:
        assert self.handle is not None
        try:
            rows = list(self.processor.handleExpiredTimer(key, timerValues, expiredTimerInfo))
        except (StateFailure, MemoryError):
            raise
        except Exception as exc:  # noqa: BLE001 - a timer has no event to set aside: skip it
            self.handle.discard()
            expiry = expiredTimerInfo.getExpiryTimeInMs()
            rows = [_letter_row(f"timer:{key}:{expiry}", exc)]
        else:
            self.handle.keep()
        self.handle.flush()
        yield from rows

    def close(self) -> None:
        self.processor.close()


def isolated(processor: StatefulProcessor) -> StatefulProcessor:
    """``processor`` with the events its code raises on set aside as dead letters.

    Its input rows must carry the events' ``partition`` and ``offset`` columns, and its output
    must be the change rows of ``liveviews.pipeline.views.CHANGE_SCHEMA``."""
    return IsolatedProcessor(processor)


def _log_position(row: Row) -> tuple[int, tuple[int, int]]:
    try:
        return int(row["partition"]), log_order(row["offset"])
    except (KeyError, ValueError, TypeError):
        raise ConfigurationError(
            "an isolated processor's rows need the events' 'partition' and 'offset' columns;"
            " select them into its input."
        ) from None


def _dead_letter(event: Row, failure: BaseException) -> Row:
    return _letter_row(f"{event['partition']}:{event['offset']}", failure)


def _letter_row(offset: str, failure: BaseException) -> Row:
    trace = "".join(traceback.format_exception(failure))[-MAX_TRACEBACK:]
    value = {"error": f"{type(failure).__name__}: {failure}", "traceback": trace}
    return Row(view=DEAD_LETTER_VIEW, key=offset, row=STAGE_VIEW,
               value=orjson.dumps(value).decode(), score=0.0)  # fmt: skip


def _last_write_wins(rows: list[Row]) -> list[Row]:
    """One change per row of a view, the last, as one attempt's ``Changes`` gives; the rows
    of several attempts may change the same row."""
    last: dict[tuple[Any, Any, Any], Row] = {}
    for r in rows:
        ident = (r[0], r[1], r[2])
        last.pop(ident, None)
        last[ident] = r
    return list(last.values())
