"""Event ids: ``<epoch>.<position>``, the resume token of every snapshot and delta frame.

``position`` is an entry id (``<ms>-<seq>``) of the change-topic shard stream that holds the
subscribed (view, key): every delta of that key after it is newer than what the client has.
``epoch`` names the store's lifetime (the ``epoch`` field of the ``lv:{m}:meta`` hash, created
once); a wiped or replaced store gets a new epoch, so an id from before can never be taken for a
position in the new one.
"""

from __future__ import annotations

import base64
import re
import secrets
from dataclasses import dataclass

import orjson

from liveviews.gateway.errors import BadRequest
from liveviews.log.events import entry_id_tuple

# ASCII digits only: ``\d`` would take any script's digits, which ``int`` reads too.
EVENT_ID_RE = re.compile(r"([A-Za-z0-9_-]{1,64})\.([0-9]{1,20})-([0-9]{1,20})")
MAX_EVENT_ID_LENGTH = 128
MAX_PART = 2**64 - 1
"""A stream entry id is two unsigned 64-bit numbers; the store refuses anything larger."""


def new_epoch() -> str:
    return secrets.token_hex(6)


position_tuple = entry_id_tuple
"""``"<ms>-<seq>"`` as a comparable pair; ``"0-0"`` sorts before every entry."""


@dataclass(frozen=True)
class EventId:
    epoch: str
    position: str

    def __str__(self) -> str:
        return f"{self.epoch}.{self.position}"

    @classmethod
    def parse(cls, raw: str) -> EventId:
        """Raises ``BadRequest`` (``invalid_last_event_id``) for anything not of this form."""
        match = EVENT_ID_RE.fullmatch(raw) if len(raw) <= MAX_EVENT_ID_LENGTH else None
        ms, seq = (int(match[2]), int(match[3])) if match else (0, 0)
        # The last possible entry id has no position after it for the store to read from.
        if match is None or ms > MAX_PART or seq > MAX_PART or (ms, seq) == (MAX_PART, MAX_PART):
            raise BadRequest(
                f"last event id {raw[:MAX_EVENT_ID_LENGTH]!r} is not of the form "
                "'<epoch>.<ms>-<seq>'; send an id exactly as the gateway sent it, or none.",
                code="invalid_last_event_id",
            )
        return cls(match[1], f"{ms}-{seq}")


MAX_QUERY_ID_LENGTH = 1024
EPOCH_RE = re.compile(r"[A-Za-z0-9_-]{1,64}")
POSITION_RE = re.compile(r"0|([0-9]{1,20})-([0-9]{1,20})")
BOUNDARY_RE = re.compile(r"[A-Za-z0-9_-]{0,800}")
DIGEST_RE = re.compile(r"[0-9a-f]{16}")


def _invalid(raw: str, form: str) -> BadRequest:
    return BadRequest(
        f"last event id {raw[:MAX_EVENT_ID_LENGTH]!r} is not an id of this subscription (of the "
        f"form '{form}'); send an id exactly as the gateway sent it on this subscription, or none.",
        code="invalid_last_event_id",
    )


def _position(raw: str) -> str | None:
    """A position as an id writes it (``0`` for ``0-0``), or None if malformed."""
    match = POSITION_RE.fullmatch(raw)
    if match is None:
        return None
    if raw == "0":
        return "0-0"
    ms, seq = int(match[1]), int(match[2])
    if ms > MAX_PART or seq > MAX_PART or (ms, seq) == (MAX_PART, MAX_PART):
        return None
    return f"{ms}-{seq}"


@dataclass(frozen=True)
class PrefixId:
    """The event id of a subscription to the keys of a view with a prefix: a position per
    change-topic shard, ``<epoch>.<pos>~<pos>~...`` (a position ``0-0`` written ``0``), and for a
    filtered one the filter's digest after a dot (docs/PROTOCOL.md, section 5.2)."""

    epoch: str
    positions: tuple[str, ...]
    filter: str | None = None

    def __str__(self) -> str:
        text = self.epoch + "." + "~".join("0" if p == "0-0" else p for p in self.positions)
        return text if self.filter is None else f"{text}.{self.filter}"

    @classmethod
    def parse(cls, raw: str, shards: int) -> PrefixId:
        epoch, dot, rest = raw.partition(".")
        rest, filtered, digest = rest.partition(".")
        parts = rest.split("~")
        positions = [_position(p) for p in parts]
        if (len(raw) > MAX_QUERY_ID_LENGTH or not dot or EPOCH_RE.fullmatch(epoch) is None
                or len(parts) != shards or None in positions
                or filtered and DIGEST_RE.fullmatch(digest) is None):  # fmt: skip
            raise _invalid(raw, "<epoch>.<position>~<position>~...[.<filter digest>]")
        return cls(epoch, tuple(p for p in positions if p is not None), digest or None)


@dataclass(frozen=True)
class WindowId:
    """The event id of a window of a key: its position, and the window's last row
    (``boundary``, None when the window held fewer rows than its limit)."""

    epoch: str
    position: str
    boundary: tuple[float, str] | None

    def __str__(self) -> str:
        return f"{self.epoch}.{self.position}.{encode_rank(self.boundary)}"

    @classmethod
    def parse(cls, raw: str) -> WindowId:
        epoch, _, rest = raw.partition(".")
        position, dot, boundary = rest.partition(".")
        pos = _position(position) if position != "0" else None
        try:
            if not dot or BOUNDARY_RE.fullmatch(boundary) is None:
                raise ValueError(boundary)
            rank = decode_rank(boundary)
        except ValueError:
            pos = None
        if len(raw) > MAX_QUERY_ID_LENGTH or EPOCH_RE.fullmatch(epoch) is None or pos is None:
            raise _invalid(raw, "<epoch>.<ms>-<seq>.<boundary>")
        return cls(epoch, pos, rank)


def encode_rank(rank: tuple[float, str] | None) -> str:
    """A row's place in a key's order, ``[score, row]`` as base64url JSON; ``""`` for none."""
    if rank is None:
        return ""
    return base64.urlsafe_b64encode(orjson.dumps([rank[0], rank[1]])).decode().rstrip("=")


def decode_rank(raw: str) -> tuple[float, str] | None:
    """``encode_rank``'s inverse; ValueError if ``raw`` is not one."""
    if not raw:
        return None
    value = orjson.loads(base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)))
    if (not isinstance(value, list) or len(value) != 2 or isinstance(value[0], bool)
            or not isinstance(value[0], int | float) or not isinstance(value[1], str)):  # fmt: skip
        raise ValueError(raw)
    return float(value[0]), value[1]


GROUP_ID_PREFIX = "g."
MAX_GROUP_ID_LENGTH = 4096


def group_event_id(ids: dict[str, str]) -> str:
    """A group's event id: each member's (``sub`` -> its last event id), as one opaque string
    that a stream of several subscriptions can resume from."""
    raw = orjson.dumps(ids, option=orjson.OPT_SORT_KEYS)
    return GROUP_ID_PREFIX + base64.urlsafe_b64encode(raw).decode().rstrip("=")


def parse_group_event_id(raw: str) -> dict[str, EventId]:
    """A group's event id as ``group_event_id`` made it: each member's id, parsed. Raises
    ``BadRequest`` (``invalid_last_event_id``) for anything else."""
    try:
        if not raw.startswith(GROUP_ID_PREFIX) or len(raw) > MAX_GROUP_ID_LENGTH:
            raise ValueError(raw)
        body = raw[len(GROUP_ID_PREFIX) :]
        ids = orjson.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
        if not isinstance(ids, dict) or not all(isinstance(v, str) for v in ids.values()):
            raise ValueError(raw)
    except ValueError:
        raise BadRequest(
            f"last event id {raw[:MAX_EVENT_ID_LENGTH]!r} is not the id of a group; send an id "
            "exactly as the gateway sent it on this group, or none.",
            code="invalid_last_event_id",
        ) from None
    return {str(sub): EventId.parse(at) for sub, at in ids.items()}
