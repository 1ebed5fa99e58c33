"""The one encoder of the frames a subscriber receives, over SSE and over WebSocket.

Every frame is a kind (``event``), an optional event id and a JSON ``data`` object. Over SSE it
is ``event:``/``id:``/``data:`` lines; over WebSocket it is one JSON text message
``{"sub", "type", "id", "data"}`` carrying the same ``data``. A ``Frame`` caches both encodings,
so a delta fanned out to many subscribers is encoded once. docs/PROTOCOL.md is the normative
description; protocol/golden/ holds examples that the tests compare with this module's output.
"""

from __future__ import annotations

from typing import Any

import orjson

from liveviews.log.events import LoggedEvent, iso

SNAPSHOT = "snapshot"
DELTA = "delta"
PROGRESS = "progress"
RESET = "reset"
END = "end"
LOG = "log"
GROUP = "group"

SSE_HEARTBEAT = b": heartbeat\n\n"


def _json(value: Any) -> bytes:
    return orjson.dumps(value)


def _single_line(value: str) -> str:
    # An id or event name with a line break would end the field early and forge another one.
    return value.replace("\r", "").replace("\n", "")


class Frame:
    """One frame; immutable once built, shared between subscribers."""

    __slots__ = ("event", "id", "data", "_sse", "_ws_tail")

    def __init__(self, event: str, data: bytes, id: str | None = None) -> None:
        self.event = _single_line(event)
        self.id = None if id is None else _single_line(id)
        self.data = data
        self._sse: bytes | None = None
        self._ws_tail: bytes | None = None

    @property
    def sse(self) -> bytes:
        if self._sse is None:
            head = f"event: {self.event}\n"
            if self.id is not None:
                head += f"id: {self.id}\n"
            self._sse = head.encode() + b"data: " + self.data + b"\n\n"
        return self._sse

    def ws(self, sub: str | None) -> bytes:
        """The WebSocket message for subscription ``sub`` (None: a frame of the socket)."""
        if self._ws_tail is None:
            tail = b'"type":' + _json(self.event)
            if self.id is not None:
                tail += b',"id":' + _json(self.id)
            self._ws_tail = tail + b',"data":' + self.data + b"}"
        if sub is None:
            return b"{" + self._ws_tail
        return b'{"sub":' + _json(sub) + b"," + self._ws_tail

    def __repr__(self) -> str:
        return f"Frame({self.event!r}, id={self.id!r})"


def snapshot(
    view: str,
    key: str,
    rows: dict[str, Any],
    frontier: dict[str, str],
    event_id: str,
    lag_ms: int | None = None,
) -> Frame:
    """``lag_ms``: how far the frontier was behind the log's head when the batch that left it
    committed (0: caught up); left out when the pipeline did not record it."""
    data: dict[str, Any] = {"view": view, "key": key, "rows": rows, "frontier": frontier}
    if lag_ms is not None:
        data["lag_ms"] = lag_ms
    return Frame(SNAPSHOT, _json(data), event_id)


def delta(view: str, key: str, ops: list[dict[str, Any]], event_id: str) -> Frame:
    return Frame(DELTA, _json({"view": view, "key": key, "ops": ops}), event_id)


def prefix_snapshot(
    view: str,
    prefix: str,
    keys: dict[str, dict[str, Any]],
    frontier: dict[str, str],
    event_id: str,
    lag_ms: int | None = None,
) -> Frame:
    """The first frame of a subscription to the keys of ``view`` that start with ``prefix``:
    each key's rows. Its deltas are those of a key (``delta``)."""
    data: dict[str, Any] = {"view": view, "prefix": prefix, "keys": keys, "frontier": frontier}
    if lag_ms is not None:
        data["lag_ms"] = lag_ms
    return Frame(SNAPSHOT, _json(data), event_id)


def window_snapshot(
    view: str,
    key: str,
    limit: int,
    rows: dict[str, Any],
    scores: dict[str, float],
    frontier: dict[str, str],
    event_id: str,
    lag_ms: int | None = None,
) -> Frame:
    """The first frame of a window of a key: its rows of highest score and their scores."""
    data: dict[str, Any] = {
        "view": view, "key": key, "limit": limit, "rows": rows, "scores": scores,
        "frontier": frontier,
    }  # fmt: skip
    if lag_ms is not None:
        data["lag_ms"] = lag_ms
    return Frame(SNAPSHOT, _json(data), event_id)


window_delta = delta
"""A window's change: its upserts carry the row's ``score`` (docs/PROTOCOL.md, section 5.1)."""


def group(
    members: list[tuple[str, Frame]], frontier: dict[str, str], event_id: str | None
) -> Frame:
    """One release of a group: its members' frames, each as the WebSocket message of its member
    (``sub``), and the frontier every member reflects now, in one frame that a client applies
    whole."""
    body = b",".join(f.ws(sub) for sub, f in members)
    return Frame(GROUP, b'{"frames":[' + body + b'],"frontier":' + _json(frontier) + b"}",
                 event_id)  # fmt: skip


def progress(frontier: dict[str, str], lag_ms: int | None = None) -> Frame:
    """``lag_ms`` as in ``snapshot``."""
    if lag_ms is None:
        return Frame(PROGRESS, _json({"frontier": frontier}))
    return Frame(PROGRESS, _json({"frontier": frontier, "lag_ms": lag_ms}))


def reset(code: str, message: str) -> Frame:
    return Frame(RESET, _json({"code": code, "message": message}))


def end(code: str, message: str, last_event_id: str | None) -> Frame:
    return Frame(END, _json({"code": code, "message": message, "last_event_id": last_event_id}))


def log_entry(event: LoggedEvent) -> Frame:
    """An event as appended to the log (``GET /v1/log/live``); no id: the feed is not resumable."""
    data = {
        "partition": event.partition,
        "id": event.id,
        "type": event.type,
        "key": event.key,
        "time": iso(event.time_ms),
        "payload": orjson.loads(event.payload_json),
    }
    return Frame(LOG, _json(data))


def ws_message(type: str, **fields: Any) -> bytes:
    """A WebSocket message that is not a subscription frame: replies, errors, heartbeats."""
    return _json({"type": type, **{k: v for k, v in fields.items() if v is not None}})


def ws_error(
    code: str, message: str, *, sub: str | None = None, req: str | None = None, **extra: Any
) -> bytes:
    body: dict[str, Any] = {"type": "error"}
    if sub is not None:
        body["sub"] = sub
    if req is not None:
        body["req"] = req
    body.update({"code": code, "message": message})
    body.update({k: v for k, v in extra.items() if v is not None})
    return _json(body)


WS_HEARTBEAT = ws_message("heartbeat")
