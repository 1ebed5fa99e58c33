"""A WebSocket subscription's sender: its frames as messages tagged with the client's
subscription id, on a socket it shares with the session's other subscriptions.

The delivery rules are the shared sender's (``liveviews.gateway.live.sender``); this says only how a
frame becomes a message (``Frame.ws``) and goes to the socket (``liveviews.gateway.live.sockets``).
A subscription whose messages back up past the subscriber buffer (``LV_SUBSCRIBER_BUFFER``) while
the socket has unsent data is a slow consumer; its session and the other subscriptions stay.
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

from liveviews.gateway.fanout.group import Group
from liveviews.gateway.fanout.items import FeedDelta, FeedRun, Progress
from liveviews.gateway.fanout.subscription import Subscription
from liveviews.gateway.live.sender import Sender
from liveviews.gateway.live.sockets import Socket
from liveviews.gateway.live.ticker import Ticker
from liveviews.gateway.metrics import Metrics
from liveviews.gateway.wire import frames


class Session(Protocol):
    """The socket's session the subscription belongs to
    (``liveviews.gateway.api.sessions.Session``)."""

    sock: Socket
    senders: dict[str, WsSender]
    reads: asyncio.Lock
    """Taken by each of its subscriptions around a read of the store (``Sender.reads``)."""

    def send(self, message: bytes) -> bool: ...

    def send_all(self, messages: list[bytes]) -> bool: ...


class WsSender(Sender):
    """One subscription of a WebSocket session."""

    __slots__ = ("session", "sub_id", "reads")

    sub: Subscription | Group
    """A view's subscription or a group of them: the session also asks it to wait for
    offsets."""

    def __init__(self, session: Session, sub_id: str, sub: Subscription | Group, ticker: Ticker,
                 metrics: Metrics, send_timeout: float) -> None:  # fmt: skip
        super().__init__(sub, ticker, metrics, send_timeout)
        self.session = session
        self.sub_id = sub_id
        self.reads = session.reads

    def _closing(self) -> bool:
        return self.session.sock.closing

    def _send_deltas(self, source: FeedDelta | FeedRun, with_progress: bool, count: int) -> bool:
        """A message per delta, and one for the frontier riding on the last if it moves this
        subscription's, in one write."""
        items = source.items if isinstance(source, FeedRun) else [source]
        messages = [item.frame.ws(self.sub_id) for item in items]
        if with_progress:
            progress = items[-1].progress
            assert progress is not None
            messages.append(progress.frame.ws(self.sub_id))
        if not self._keeps_up(len(messages), self.session.sock.unsent):
            return False
        self.session.send_all(messages)
        return True

    def _send_progress(self, progress: Progress) -> bool:
        if not self._keeps_up(1, self.session.sock.unsent):
            return False
        self.session.send(progress.frame.ws(self.sub_id))
        return True

    def _send_frames(self, out: list[frames.Frame], first: bool) -> bool:
        messages = [f.ws(self.sub_id) for f in out]
        if not first and not self._keeps_up(len(messages), self.session.sock.unsent):
            return False
        self.session.send_all(messages)
        return True

    def _unsent(self) -> bool:
        return self.session.sock.unsent

    def _end_frame(self, code: str, message: str, **fields: Any) -> bytes:
        return frames.ws_error(code, message, sub=self.sub_id, **fields)

    def _close(self, last: bytes | None) -> None:
        senders = self.session.senders
        if senders.get(self.sub_id) is self:
            del senders[self.sub_id]
        self.sub.close()
        if last is not None:
            self.session.send(last)
