"""What the change feed hands the hub, and the hub its subscribers: deltas, runs of deltas,
frontiers, and the notice that the store was replaced.

Each item's frame is encoded once, on first use, and shared by every subscriber that takes it.
What a transport makes of it (an HTTP chunk, say) is kept in the item's ``encoded``, filled by
the first sender that needs it (``liveviews.gateway.live``): the fan-out itself makes no bytes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import orjson

from liveviews.changes.topic import VIEWS_FRONTIER, Delta
from liveviews.gateway.wire import frames
from liveviews.gateway.wire.eventid import EventId, position_tuple


@dataclass(eq=False)
class FeedDelta:
    """A delta as read by the feed in ``epoch``."""

    epoch: str
    delta: Delta
    progress: Progress | None = None
    """A frontier that covers this delta and every earlier one of the dispatch, handed out with
    it: a sender that takes both writes them together."""
    encoded: dict[str, bytes] = field(default_factory=dict, repr=False)
    """The item as each transport writes it, once encoded (``liveviews.gateway.live``)."""

    @cached_property
    def frame(self) -> frames.Frame:
        d = self.delta
        return frames.delta(d.view, d.key, d.ops, str(EventId(self.epoch, d.id)))

    @cached_property
    def position(self) -> tuple[int, int]:
        return position_tuple(self.delta.id)


@dataclass(eq=False)
class FeedRun:
    """Two or more deltas of one (view, key) from one read of the feed, in their order, the
    last with any frontier riding on it. A sender that has none of them yet takes them all in
    one write: a gateway that falls behind makes fewer writes per delta, not more."""

    items: list[FeedDelta]
    encoded: dict[str, bytes] = field(default_factory=dict, repr=False)


@dataclass(frozen=True)
class EpochChanged:
    """The feed now reads a store of another epoch: older positions mean nothing there."""

    epoch: str


@dataclass(frozen=True)
class Progress:
    """The frontier ``frontier_name`` after the ``lv:{m}:progress`` entry ``entry``, as one shared
    frame. A pipeline's frontier is named after it; ``VIEWS_FRONTIER`` is every view's."""

    epoch: str
    entry: str
    frame: frames.Frame
    frontier_name: str = VIEWS_FRONTIER
    encoded: dict[str, bytes] = field(default_factory=dict, compare=False, repr=False)

    @cached_property
    def position(self) -> tuple[int, int]:
        return position_tuple(self.entry)

    @cached_property
    def frontier(self) -> str:
        """The frame's data as a string, to compare with what a subscriber was sent last."""
        return self.frame.data.decode()

    @cached_property
    def reached(self) -> dict[str, tuple[int, int]]:
        """Partition -> the entry id the frontier reached, as a tuple; parsed only when a
        subscriber waits for an offset (``Hub.wait``)."""
        frontier = orjson.loads(self.frame.data)["frontier"]
        return {p: position_tuple(at) for p, at in frontier.items()}


Item = FeedDelta | EpochChanged
"""What a subscriber is handed one at a time (progress goes its own way)."""
