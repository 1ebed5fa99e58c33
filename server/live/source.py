"""What a sender delivers: the frames of one stream, whoever publishes them.

A view's subscription (``liveviews.gateway.fanout.subscription``, and the query-shaped ones of
``liveviews.gateway.fanout.query``) and a reader of the log feed (``liveviews.gateway.feed.log``)
are both a ``FrameSource``. One sender (``liveviews.gateway.live.sender``) delivers any of them,
so every stream keeps the same rules: heartbeats, the slow-consumer rule and the send timeout,
and its end at token expiry or shutdown.
"""

from __future__ import annotations

from typing import Protocol

from liveviews.gateway.fanout.cursor import Cursor
from liveviews.gateway.fanout.subscriber import Subscriber
from liveviews.gateway.wire import frames


class FrameSource(Protocol):
    """A stream's frames as its sender takes them.

    Its publisher (the hub, the log feed) never waits for it: it buffers what comes in the
    source's ``subscriber``, up to the subscriber buffer, and wakes the sender; a buffer that
    would overflow marks the subscriber overflowed, and the sender ends the stream with
    ``slow_consumer``.
    """

    last_event_id: str | None
    """Where the client resumes from, as its ``end`` frame says (None: from nowhere)."""

    @property
    def subscriber(self) -> Subscriber | None:
        """Its publisher's side: state, buffer and wake-ups; None until started."""
        ...

    @property
    def history(self) -> str | None:
        """Set while a resume has missed frames left to read from the store: each page of them
        waits for the client to take what it was sent before."""
        ...

    @property
    def cursor(self) -> Cursor | None:
        """Set if, once up to date, the hub may hand its items straight to the sender, which
        orders them by this cursor; None if the source makes its frames itself."""
        ...

    def __str__(self) -> str:
        """What the gateway's log calls it."""
        ...

    def has_frames(self) -> bool:
        """Is there something to take now: history, or what the publisher buffered?"""
        ...

    async def start(self) -> list[frames.Frame]:
        """Attach to its publisher; the stream's first frames."""
        ...

    async def next_frames(self) -> list[frames.Frame]:
        """The frames ready now, possibly none; ``SlowConsumer`` if the buffer overflowed."""
        ...

    def close(self) -> None:
        """Detach from its publisher: nothing more is buffered for it."""
        ...
