"""Event ids: ``<epoch>.<position>``, the resume token of every snapshot and delta frame.

``position`` is an entry id (``<ms>-<seq>``) of the change-topic shard stream that holds the
subscribed (view, key): every delta of that key after it is newer than what the client has.
``epoch`` names the store's lifetime (the ``epoch`` field of the ``lv:meta`` hash, created once);
a wiped or replaced store gets a new epoch, so an id from before can never be taken for a
position in the new one.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass

from server.errors import BadRequest
from streaming.core.events import entry_id_tuple

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
