"""Waits for SSE streams: read-your-writes where the stream has no way back to its gateway.

Over WebSocket a client sends ``wait`` on the socket that carries its subscription. An SSE
stream's client posts it instead (``POST /v1/streams/{stream}/wait``, naming the id it gave the
stream with its ``stream`` parameter), and that request may reach any gateway process: another
worker on the same port, or another gateway behind the load balancer. So the wait goes through
the store: appended to ``lv:{m}:waits``, read by every process with the change topic, and passed
to the open streams a process holds under that id, for the same subject. A wait is a request to
send a frontier sooner; lost, the stream still gets it at the quiet rhythm.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Protocol

import orjson

from liveviews.changes.topic import STREAM_WAITS_MAXLEN, STREAM_WAITS_STREAM
from liveviews.gateway.errors import BadRequest
from liveviews.gateway.fanout.lane import Wanted
from liveviews.gateway.feed.store import Client


class Waiter(Protocol):
    """A subscription of a stream (``liveviews.gateway.fanout.subscription.Subscription``)."""

    def wait_for(self, wanted: Wanted) -> None: ...


STREAM_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")


def stream_id(raw: str | None) -> str | None:
    """The ``stream`` parameter of an SSE subscription, checked; None when not given."""
    if raw is None:
        return None
    if STREAM_ID.fullmatch(raw) is None:
        raise BadRequest(
            "'stream' is an id the client chooses for the stream, 1 to 64 characters of "
            "A-Z, a-z, 0-9, '_' and '-' (a random one, such as 16 random bytes in base64url).",
            code="invalid_parameter",
        )
    return raw


async def post(client: Client, stream: str, subject: str, wanted: Wanted) -> None:
    """Pass a wait to whichever process holds ``stream``."""
    offsets = {p: f"{ms}-{seq}" for p, (ms, seq) in wanted.items()}
    fields: dict[Any, Any] = {
        "stream": stream, "subject": subject, "offsets": orjson.dumps(offsets)
    }  # fmt: skip
    await client.xadd(STREAM_WAITS_STREAM, fields, maxlen=STREAM_WAITS_MAXLEN)


class StreamWaits:
    """The open SSE streams of this process that have an id, and the waits read for them."""

    def __init__(self) -> None:
        self.streams: dict[str, dict[Waiter, str]] = {}

    def open(self, stream: str, subject: str, sub: Waiter) -> Callable[[], None]:
        """Hold ``sub`` under ``stream`` until the returned function is called."""
        self.streams.setdefault(stream, {})[sub] = subject

        def close() -> None:
            held = self.streams.get(stream)
            if held is not None:
                held.pop(sub, None)
                if not held:
                    del self.streams[stream]

        return close

    def take(self, entries: list[tuple[bytes, dict[bytes, bytes]]]) -> None:
        """Waits read from ``lv:{m}:waits``: each to the streams held under its id."""
        if not self.streams:
            return
        for _, fields in entries:
            held = self.streams.get(fields.get(b"stream", b"").decode(errors="replace"))
            if not held:
                continue
            subject = fields.get(b"subject", b"").decode(errors="replace")
            try:
                offsets = orjson.loads(fields[b"offsets"])
                wanted: Wanted = {
                    p: (int(ms), int(seq))
                    for p, (ms, seq) in ((p, at.split("-")) for p, at in offsets.items())
                }
            except (KeyError, ValueError, TypeError, AttributeError, orjson.JSONDecodeError):
                continue  # not written by a gateway of this version
            for sub, owner in list(held.items()):
                if owner == subject:
                    sub.wait_for(wanted)
