"""What a subscriber was sent last: the protocol's ordering rules as state, in one place."""

from __future__ import annotations

from liveviews.gateway.fanout.items import FeedDelta, Progress


class Cursor:
    """What a subscriber was sent last: the protocol's ordering rules as state.

    A ``Subscription`` is one; a cohort of subscriptions in step shares one
    (``liveviews.gateway.fanout.cohort``).
    """

    __slots__ = ("epoch", "position", "progress_position", "frontier", "last_event_id")

    def __init__(self) -> None:
        self.epoch = ""
        self.position = (0, 0)
        self.progress_position = (0, 0)
        # The last frontier sent, as progress data: never send the same twice. A string, not
        # the encoder's bytes, which keep a buffer of a few KiB each per subscription.
        self.frontier = ""
        self.last_event_id: str | None = None

    def is_next(self, item: FeedDelta) -> bool:
        """Is ``item`` a delta to send: in this epoch, after the last position sent?"""
        return item.epoch == self.epoch and item.position > self.position

    def sent(self, item: FeedDelta) -> None:
        self.position = item.position
        self.last_event_id = item.frame.id

    def accept_progress(self, progress: Progress) -> bool:
        """Does ``progress`` move this subscription's frontier? Then note it."""
        if (
            progress.epoch != self.epoch
            or progress.position <= self.progress_position
            or progress.frontier == self.frontier
        ):
            return False
        self.progress_position = progress.position
        self.frontier = progress.frontier
        return True

    def same_as(self, other: Cursor) -> bool:
        return (
            self.position == other.position
            and self.epoch == other.epoch
            and self.last_event_id == other.last_event_id
            and self.progress_position == other.progress_position
            and self.frontier == other.frontier
        )

    def copy_to(self, other: Cursor) -> None:
        other.epoch = self.epoch
        other.position = self.position
        other.progress_position = self.progress_position
        other.frontier = self.frontier
        other.last_event_id = self.last_event_id
