"""What a pipeline's source lets through: entries it can decode, and not set aside before.

The gateway validates every event it appends, but the log is open to other writers: an older
version of the application, another producer, a hand-typed ``XADD``. An entry that is not an
event of the application (a field missing, a time that is not a number, a payload that does
not match its type's schema, a key that is not its payload's partition key or that belongs to
another partition) would stop any view that reads it. The source checks each entry here, in
the pipeline's own process, and records the ones it cannot decode as dead letters
(``liveviews.log.deadletters``); the same check on a replayed batch makes the same decision.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from liveviews.app import App
from liveviews.log import deadletters
from liveviews.log.events import (
    FIELD_KEY,
    FIELD_PAYLOAD,
    FIELD_TIME,
    FIELD_TYPE,
    MAX_EVENT_TIME_MS,
    partition_for,
)

Entry = tuple[bytes, dict[bytes, bytes]]  # (entry id, fields), as XRANGE answers


class Undecodable(ValueError):
    """A log entry that is not an event of the application; the message says why."""


def check_entry(app: App, partition: int, partitions: int, fields: dict[bytes, bytes]) -> None:
    """Raises ``Undecodable`` unless ``fields`` hold an event every view can rely on."""
    missing = [f.decode() for f in (FIELD_TYPE, FIELD_KEY, FIELD_TIME, FIELD_PAYLOAD)
               if f not in fields]  # fmt: skip
    if missing:
        raise Undecodable(f"the entry has no {', '.join(missing)} field.")
    try:
        type_name = fields[FIELD_TYPE].decode()
        key = fields[FIELD_KEY].decode()
        payload_text = fields[FIELD_PAYLOAD].decode()
    except UnicodeDecodeError:
        raise Undecodable("the entry's type, key or payload is not UTF-8.") from None
    et = app.event_types.get(type_name)
    if et is None:
        raise Undecodable(f"event type {type_name!r} is not declared by {app.name!r}.")
    time_raw = fields[FIELD_TIME]
    if not time_raw.isascii() or not time_raw.isdigit():
        raise Undecodable(f"time {time_raw[:40]!r} is not milliseconds since 1970.")
    if int(time_raw) > MAX_EVENT_TIME_MS:
        raise Undecodable("time is after year 9999.")
    try:
        payload = orjson.loads(payload_text)
    except orjson.JSONDecodeError:
        raise Undecodable("the payload is not JSON.") from None
    clean = et.schema.validate(payload)  # InvalidEvent says which field
    expected = et.partition_key(clean)
    if key != expected:
        raise Undecodable(f"key {key!r} is not the event's partition key {expected!r}.")
    if partition_for(key, partitions) != partition:
        raise Undecodable(f"key {key!r} belongs to another log partition than {partition}.")


class Screen:
    """One pipeline's filter over the entries its source reads."""

    def __init__(self, client: Any, app: App, pipeline: str, partitions: int) -> None:
        self.client = client
        self.app = app
        self.pipeline = pipeline
        self.partitions = partitions

    def passing(self, answers: Sequence[tuple[int, list[Entry]]]) -> list[tuple[int, list[Entry]]]:
        """Each partition's entries less those set aside, before or now."""
        quarantined = deadletters.quarantined(self.client, self.pipeline)
        letters = []
        out = []
        for p, entries in answers:
            kept = []
            for entry_id, fields in entries:
                offset = f"{p}:{entry_id.decode()}"
                if offset in quarantined:
                    continue
                try:
                    check_entry(self.app, p, self.partitions, fields)
                except Exception as exc:  # noqa: BLE001 - a schema's own check may raise anything
                    letters.append(deadletters.letter(
                        self.pipeline, offset, deadletters.STAGE_DECODE, _reason(exc),
                        fields=fields, trace="",
                    ))  # fmt: skip
                    continue
                kept.append((entry_id, fields))
            out.append((p, kept))
        if letters:
            deadletters.record(self.client, letters)
        return out


def _reason(exc: Exception) -> str:
    message = getattr(exc, "message", None) or str(exc)
    return f"cannot decode the entry: {message}"
