"""The one decoder of what the gateway sends, over WebSocket or as SSE events, and encoder of
what the client sends over WebSocket: the Python mirror of client-js/src/frames.js.
docs/PROTOCOL.md is normative, and protocol/golden/ holds the examples this module is tested
against byte for byte.

A frame is its kind (``snapshot``, ``delta``, ``progress``, ``reset``, ``end``), its event id
(snapshot and delta only), its JSON ``data`` and the subscription id it belongs to (over SSE,
where a stream is one subscription, the stream's own name). Every other message of the socket
is one of the small classes below.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import orjson

from liveviews.client.errors import GatewayError, ProtocolError, gateway_error
from liveviews.log.events import POSITION_RE as ENTRY_ID
from liveviews.log.events import Offset

FRAME_KINDS = frozenset({"snapshot", "delta", "progress", "reset", "end"})

Shape = Literal["key", "prefix", "window"]


@dataclass(frozen=True)
class Frame:
    kind: str
    id: str | None
    data: dict[str, Any]
    sub: str


@dataclass(frozen=True)
class GroupFrame:
    """One release of a group (``sub``): its members' frames, applied whole, after which every
    member reflects the log up to ``frontier`` (docs/PROTOCOL.md, section 5.3)."""

    sub: str
    id: str | None
    frames: list[Frame]
    frontier: dict[str, str]


@dataclass(frozen=True)
class Heartbeat:
    pass


@dataclass(frozen=True)
class Authenticated:
    subject: str
    expires_at: float


@dataclass(frozen=True)
class Published:
    req: str
    offsets: list[Offset]


@dataclass(frozen=True)
class Unsubscribed:
    sub: str | None


@dataclass(frozen=True)
class ErrorMessage:
    """An error of a subscription (``sub``), of a request (``req``), or of the socket (neither)."""

    sub: str | None
    req: str | None
    error: GatewayError


@dataclass(frozen=True)
class Unknown:
    """A message of a type this client does not know: a newer gateway's, passed over."""

    message: dict[str, Any]


Message = (
    Frame
    | GroupFrame
    | Heartbeat
    | Authenticated
    | Published
    | Unsubscribed
    | ErrorMessage
    | Unknown
)


def _check(ok: bool, kind: str, what: str) -> None:
    if not ok:
        raise ProtocolError(f"a {kind} frame must have {what}")


def _is_score(v: Any) -> bool:
    return (
        isinstance(v, int | float) and not isinstance(v, bool) and v == v and abs(v) != float("inf")
    )


def _is_whole(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def snapshot_shape(data: dict[str, Any]) -> Shape:
    """Which query a snapshot's data answers (docs/PROTOCOL.md, section 5.1)."""
    if "prefix" in data:
        return "prefix"
    if "limit" in data:
        return "window"
    return "key"


def _check_lag(kind: str, data: dict[str, Any]) -> None:
    lag = data.get("lag_ms")
    _check(lag is None or (_is_whole(lag) and lag >= 0), kind, "a lag_ms of whole ms, if any")


def _check_snapshot(data: dict[str, Any]) -> None:
    kind = "snapshot"
    _check(isinstance(data.get("frontier"), dict), kind, "a frontier")
    shape = snapshot_shape(data)
    named = "prefix" if shape == "prefix" else "key"
    _check(
        isinstance(data.get("view"), str) and isinstance(data.get(named), str),
        kind,
        f"a view and a {named}",
    )
    if shape == "prefix":
        keys = data.get("keys")
        _check(
            isinstance(keys, dict) and all(isinstance(r, dict) for r in keys.values()),
            kind,
            "keys that map each key to its rows",
        )
    elif shape == "window":
        rows, scores = data.get("rows"), data.get("scores")
        _check(_is_whole(data["limit"]) and data["limit"] >= 1, kind, "a limit of at least 1 row")
        _check(isinstance(rows, dict) and isinstance(scores, dict), kind, "rows and their scores")
        assert isinstance(rows, dict) and isinstance(scores, dict)
        _check(all(_is_score(scores.get(r)) for r in rows), kind, "a number as every row's score")
    else:
        _check(isinstance(data.get("rows"), dict), kind, "rows")
    _check_lag(kind, data)


def _check_ops(ops: Any) -> None:
    _check(isinstance(ops, list), "delta", "an ops array")
    for op in ops:
        _check(
            isinstance(op, dict) and isinstance(op.get("row"), str), "delta", "ops with a row id"
        )
        _check(
            op["op"] == "delete" or (op["op"] == "upsert" and "value" in op),
            "delta",
            "ops that are upserts with a value or deletes",
        )
        _check("score" not in op or _is_score(op["score"]), "delta", "a number as an op's score")


def frame(kind: str, id: Any, data: Any, sub: str) -> Frame:
    """A frame of ``kind``, checked against the protocol. Unknown kinds pass, for newer gateways."""
    _check(isinstance(data, dict), kind, "a data object")
    if kind in ("snapshot", "delta"):
        _check(isinstance(id, str), kind, "an id")
    if kind == "snapshot":
        _check_snapshot(data)
    elif kind == "delta":
        _check(
            isinstance(data.get("view"), str) and isinstance(data.get("key"), str),
            kind,
            "a view and a key",
        )
        _check_ops(data.get("ops"))
    elif kind == "progress":
        _check(isinstance(data.get("frontier"), dict), kind, "a frontier")
        _check_lag(kind, data)
    elif kind in ("reset", "end"):
        _check(
            isinstance(data.get("code"), str) and isinstance(data.get("message"), str),
            kind,
            "a code and a message",
        )
    return Frame(kind, id if isinstance(id, str) else None, data, sub)


def decode_offsets(offsets: Any) -> list[Offset]:
    """The offsets of a publish answer (``POST /v1/events`` body, or a WebSocket ``published``)."""
    if not isinstance(offsets, list):
        raise ProtocolError("a publish answer must carry an offsets array")
    out = []
    for o in offsets:
        if not (
            isinstance(o, dict)
            and _is_whole(o.get("partition"))
            and isinstance(o.get("id"), str)
            and ENTRY_ID.fullmatch(o["id"])
        ):
            raise ProtocolError("an offset must be {partition, id, token}")
        out.append(Offset(o["partition"], o["id"]))
    return out


def decode(text: str | bytes) -> Message:
    """One WebSocket message of the gateway."""
    try:
        msg = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise ProtocolError("a WebSocket message is not JSON") from exc
    if not isinstance(msg, dict) or not isinstance(msg.get("type"), str):
        raise ProtocolError("a WebSocket message must be an object with a type")
    kind = msg["type"]
    if kind in FRAME_KINDS:
        if not isinstance(msg.get("sub"), str):
            raise ProtocolError(f"a {kind} message must name its sub")
        return frame(kind, msg.get("id"), msg.get("data"), msg["sub"])
    if kind == "group":
        return group_frame(msg)
    if kind == "heartbeat":
        return Heartbeat()
    if kind == "authenticated":
        subject, expires = msg.get("subject"), msg.get("expires_at")
        if not isinstance(subject, str) or not _is_score(expires):
            raise ProtocolError("an authenticated message must carry subject and expires_at")
        return Authenticated(subject, float(msg["expires_at"]))
    if kind == "published":
        if not isinstance(msg.get("req"), str):
            raise ProtocolError("a published message must carry its req")
        return Published(msg["req"], decode_offsets(msg.get("offsets")))
    if kind == "unsubscribed":
        return Unsubscribed(msg.get("sub"))
    if kind == "error":
        if not isinstance(msg.get("code"), str):
            raise ProtocolError("an error message must carry a code")
        return ErrorMessage(msg.get("sub"), msg.get("req"), gateway_error(msg))
    return Unknown(msg)


def group_frame(msg: dict[str, Any]) -> GroupFrame:
    """A ``group`` message: each member frame checked as the same frame on its own is."""
    data = msg.get("data")
    if not isinstance(msg.get("sub"), str) or not isinstance(data, dict):
        raise ProtocolError("a group message must name its sub and carry data")
    members, frontier = data.get("frames"), data.get("frontier")
    if not isinstance(members, list) or not isinstance(frontier, dict):
        raise ProtocolError("a group frame carries a list of frames and a frontier")
    out = []
    for m in members:
        if not isinstance(m, dict) or m.get("type") not in FRAME_KINDS - {"progress", "end"}:
            raise ProtocolError("a group frame holds snapshot, delta and reset frames only")
        if not isinstance(m.get("sub"), str):
            raise ProtocolError("each frame of a group names its member's sub")
        out.append(frame(m["type"], m.get("id"), m.get("data"), m["sub"]))
    if not all(isinstance(p, str) and isinstance(at, str) for p, at in frontier.items()):
        raise ProtocolError("a group frame's frontier maps partitions to positions")
    return GroupFrame(msg["sub"], msg.get("id"), out, dict(frontier))


def decode_sse(event: str, id: str | None, data: str, sub: str = "") -> Frame:
    """One event of an SSE stream (its ``event``, ``id`` and ``data`` fields): the frame it
    carries, checked as the same frame over WebSocket is."""
    return frame(event, id, _sse_data(event, data), sub)


def decode_sse_group(id: str | None, data: str, sub: str = "") -> GroupFrame:
    """A ``group`` event of an SSE stream, checked as the same frame over WebSocket is."""
    return group_frame({"type": "group", "sub": sub, "id": id, "data": _sse_data("group", data)})


def _sse_data(event: str, data: str) -> Any:
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise ProtocolError(f"the data of a {event} event is not JSON") from exc


def _text(fields: dict[str, Any]) -> str:
    # orjson keeps the fields' order and writes floats as the gateway does (9.0, not 9).
    return orjson.dumps(fields).decode()


def encode_auth(token: str) -> str:
    return _text({"type": "auth", "token": token})


def encode_subscribe(
    sub: str,
    view: str,
    *,
    key: str | None = None,
    prefix: str | None = None,
    limit: int | None = None,
    after: tuple[float, str] | None = None,
    filter: dict[str, Any] | None = None,
    last_event_id: str | None = None,
) -> str:
    """A subscribe message, with its fields in the order of the golden files. ``filter`` goes
    as it was given: the gateway's digest of it does not depend on its members' order."""
    fields: dict[str, Any] = {"type": "subscribe", "sub": sub, "view": view}
    optional = {"key": key, "prefix": prefix, "filter": filter, "limit": limit}
    fields.update({name: value for name, value in optional.items() if value is not None})
    if after is not None:
        fields["after"] = {"score": float(after[0]), "row": after[1]}
    if last_event_id is not None:
        fields["last_event_id"] = last_event_id
    return _text(fields)


def encode_subscribe_group(sub: str, members: Sequence[tuple[str, str, str, str | None]]) -> str:
    """A group's subscribe message: ``members`` as (sub, view, key, last event id or None)."""
    listed = []
    for member, view, key, last_event_id in members:
        fields = {"sub": member, "view": view, "key": key}
        if last_event_id is not None:
            fields["last_event_id"] = last_event_id
        listed.append(fields)
    return _text({"type": "subscribe", "sub": sub, "members": listed})


def encode_unsubscribe(sub: str) -> str:
    return _text({"type": "unsubscribe", "sub": sub})


def encode_publish(req: str, events: Sequence[Any], idempotency_key: str | None = None) -> str:
    fields: dict[str, Any] = {"type": "publish", "req": req, "events": list(events)}
    if idempotency_key is not None:
        fields["idempotency_key"] = idempotency_key
    return _text(fields)


def encode_wait(sub: str, offsets: Sequence[Offset]) -> str:
    return _text({"type": "wait", "sub": sub, "offsets": [o.to_dict() for o in offsets]})
