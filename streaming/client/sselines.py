"""Splits a ``text/event-stream`` into its events, by the HTML standard's rules as client-js's
``SseParser`` does: lines end with CRLF, LF or CR; ``field: value`` loses one space after the
colon; a blank line ends an event. What an event's data means is ``frames.decode_sse``'s."""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass

LINE_END = re.compile(r"\r\n|\r|\n")


@dataclass(frozen=True)
class SseEvent:
    event: str
    id: str | None
    """The event's own ``id`` field, None without one (the gateway gives one to snapshots and
    deltas only)."""
    data: str


@dataclass(frozen=True)
class SseComment:
    """A comment line: the gateway's heartbeat."""

    text: str


class SseParser:
    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")()
        self._pending: list[str] = []
        self._after_cr = False
        """The last chunk ended with a CR: an LF that starts the next one is the same line end."""
        self._event = ""
        self._id: str | None = None
        self._data: list[str] = []

    def feed(self, chunk: bytes) -> list[SseEvent | SseComment]:
        """What ``chunk`` completed, in order; the rest waits for the next chunk."""
        text = self._decoder.decode(chunk)
        if not text:
            return []
        if self._after_cr and text[0] == "\n":
            text = text[1:]
        self._after_cr = text.endswith("\r")
        self._pending.append(text)
        if "\n" not in text and "\r" not in text:
            return []  # a large snapshot comes in many chunks of one line: joined at its end
        text = "".join(self._pending)
        self._pending.clear()
        out: list[SseEvent | SseComment] = []
        start = 0
        for end in LINE_END.finditer(text):
            item = self._line(text[start : end.start()])
            start = end.end()
            if item is not None:
                out.append(item)
        if start < len(text):
            self._pending.append(text[start:])
        return out

    def _line(self, line: str) -> SseEvent | SseComment | None:
        if not line:
            event = None
            if self._data:
                event = SseEvent(self._event or "message", self._id, "\n".join(self._data))
            self._event, self._id, self._data = "", None, []
            return event
        if line.startswith(":"):
            return SseComment(line[1:].removeprefix(" "))
        field, colon, value = line.partition(":")
        value = value.removeprefix(" ") if colon else ""
        if field == "event":
            self._event = value
        elif field == "data":
            self._data.append(value)
        elif field == "id" and "\0" not in value:
            self._id = value
        return None  # retry and unknown fields do not concern this client
