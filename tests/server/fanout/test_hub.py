"""The hub's hand-out order: a frontier never reaches a subscriber before a delta it covers.

When a read of the change feed brings deltas and the frontier that covers them, the frontier
rides with the last delta of each key that was not passed one within the progress interval (one
write for both on an SSE stream); a key passed one more recently is owed the newest, on its own,
one and a half intervals later; a key that did not change gets the newest at the quiet rhythm.
"""

from __future__ import annotations

import asyncio
import time

import uvloop

from liveviews.changes.topic import VIEWS_FRONTIER, Delta
from liveviews.gateway.fanout.hub import Hub
from liveviews.gateway.fanout.items import FeedDelta, FeedRun, Item, Progress
from liveviews.gateway.fanout.subscriber import SubscriberState
from liveviews.gateway.metrics import Metrics
from liveviews.gateway.wire import frames

EPOCH = "e"


class Recorder:
    """A sink that notes what it is handed, in order; like a stream, it takes a frontier once."""

    def __init__(self) -> None:
        self.got: list[str] = []
        self.runs: list[list[str]] = []
        self.frontier = ""

    def deliver(self, item: Item) -> bool:
        assert isinstance(item, FeedDelta)
        self.got.append(item.delta.id)
        if item.progress is not None:
            self.deliver_progress(item.progress)
        return True

    def deliver_run(self, run: FeedRun) -> bool:
        self.runs.append([item.delta.id for item in run.items])
        return all(self.deliver(item) for item in run.items)

    def deliver_progress(self, progress: Progress) -> None:
        if progress.entry != self.frontier:
            self.frontier = progress.entry
            self.got.append(f"progress {progress.entry}")


def delta(entry: str, key: str) -> Delta:
    return Delta(entry, "likes", key, [{"op": "delete", "row": "r"}], "liveviews", 1)


def progress(entry: str, frontier_name: str = VIEWS_FRONTIER) -> list[Progress]:
    """One read's progress: the frontier ``frontier_name`` at ``entry``."""
    return [Progress(EPOCH, entry, frames.progress({"0": entry}), frontier_name)]


def attach(hub: Hub, key: str) -> Recorder:
    sink = Recorder()
    hub.attach("likes", key, 16).sink = sink
    return sink


async def test_a_due_frontier_rides_with_the_last_delta_of_each_key() -> None:
    hub = Hub(Metrics(), progress_interval=0.2)
    a, b, quiet = attach(hub, "a"), attach(hub, "b"), attach(hub, "quiet")
    hub.publish(EPOCH, [delta("1-0", "a"), delta("1-1", "b"), delta("1-2", "a")],
                progress("9-0"))  # fmt: skip
    # With the last delta of each key, and not before.
    assert a.got == ["1-0", "1-2", "progress 9-0"]
    assert b.got == ["1-1", "progress 9-0"]
    assert a.runs == [["1-0", "1-2"]] and b.runs == [], "a key's deltas go out together"
    # A key that did not change: at the quiet rhythm (here the progress interval), counted from
    # its snapshot's frontier.
    assert quiet.got == []
    await asyncio.sleep(0.2 * 1.4)
    assert quiet.got == ["progress 9-0"]
    hub.close()


async def test_a_frontier_not_due_waits_for_the_next_read_or_the_quiet_rhythm() -> None:
    interval = 0.2
    hub = Hub(Metrics(), progress_interval=interval)
    a = attach(hub, "a")
    hub.publish(EPOCH, [delta("1-0", "a")], progress("1-0"))
    hub.publish(EPOCH, [delta("2-0", "a")], progress("2-0"))  # not due: held back
    assert a.got[-1] == "2-0"
    await asyncio.sleep(interval * 1.1)
    hub.publish(EPOCH, [delta("3-0", "a")], progress("3-0"))  # due: rides, newest only
    assert a.got[-2:] == ["3-0", "progress 3-0"]
    assert "progress 2-0" not in a.got
    hub.publish(EPOCH, [], progress("4-0"))  # a quiet feed: no read follows
    await asyncio.sleep(interval * 0.8)
    assert a.got[-1] == "progress 3-0", "sent before the interval was over"
    await asyncio.sleep(interval * 0.7)  # the quiet interval (here the same) and a quarter
    assert a.got[-1] == "progress 4-0", "held back more than a quarter interval too long"
    hub.close()


class SlowRecorder(Recorder):
    """A sink whose hand-out takes ``seconds``, like thousands of streams written in a row."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds

    def deliver(self, item: Item) -> bool:
        time.sleep(self.seconds)
        return super().deliver(item)


async def test_a_frontier_that_falls_due_during_a_hand_out_rides_with_the_next_read() -> None:
    interval = 0.1
    hub = Hub(Metrics(), progress_interval=interval)
    sink = SlowRecorder(0.0)
    hub.attach("likes", "a", 16).sink = sink
    hub.publish(EPOCH, [delta("1-0", "a")], progress("1-0"))
    sink.seconds = interval * 1.5
    hub.publish(EPOCH, [delta("2-0", "a")], progress("2-0"))  # due only once handed out
    assert sink.got[-1] == "2-0", "sent on its own, in a write of its own"
    sink.seconds = 0.0
    hub.publish(EPOCH, [delta("3-0", "a")], progress("3-0"))
    assert sink.got[-2:] == ["3-0", "progress 3-0"]
    hub.close()


async def test_each_view_follows_the_frontier_of_the_pipeline_that_writes_it() -> None:
    pipelines = {"likes": "entities", "activity": "activity"}
    hub = Hub(Metrics(), progress_interval=0.0, frontier_of=pipelines.__getitem__)
    likes = attach(hub, "a")
    activity = Recorder()
    hub.attach("activity", "global", 16).sink = activity
    # One read brings a delta of "likes" and both pipelines' frontiers: each subscriber
    # gets its own pipeline's, the likes subscriber with its delta, in the same write.
    hub.publish(EPOCH, [delta("1-0", "a")],
                progress("5-0", "entities") + progress("3-0", "activity"))  # fmt: skip
    assert likes.got == ["1-0", "progress 5-0"]
    assert activity.got == ["progress 3-0"]
    # A frontier moves only its own pipeline's subscribers.
    hub.publish(EPOCH, [], progress("6-0", "entities"))
    assert likes.got[-1] == "progress 6-0" and activity.got == ["progress 3-0"]
    # The views' frontier (every pipeline's oldest) reaches neither: each follows its own.
    hub.publish(EPOCH, [], progress("4-0"))
    assert likes.got[-1] == "progress 6-0" and activity.got == ["progress 3-0"]
    hub.close()


async def test_a_subscriber_without_a_sink_buffers_a_run_or_overflows_on_it_as_on_its_deltas() -> (
    None
):
    metrics = Metrics()
    hub = Hub(metrics)
    fits = hub.attach("likes", "a", 3)
    fits.buffer.append(FeedDelta(EPOCH, delta("0-9", "a")))
    too_many = hub.attach("likes", "a", 3)
    too_many.buffer.append(FeedDelta(EPOCH, delta("0-9", "a")))
    too_many.capacity = 2
    hub.publish(EPOCH, [delta("1-0", "a"), delta("1-1", "a")])
    items, _ = fits.take()
    assert [i.delta.id for i in items if isinstance(i, FeedDelta)] == ["0-9", "1-0", "1-1"]
    # One buffered and two more is three, over a capacity of two: a slow consumer.
    assert too_many.state is SubscriberState.OVERFLOWED
    assert too_many not in hub.all and metrics.slow_consumers == 1
    hub.close()


async def test_deltas_of_a_key_out_of_position_order_go_out_one_by_one_in_read_order() -> None:
    hub = Hub(Metrics())
    a = attach(hub, "a")
    hub.publish(EPOCH, [delta("2-0", "a"), delta("1-0", "a"), delta("3-0", "a")])
    assert a.runs == [] and a.got == ["2-0", "1-0", "3-0"]
    hub.close()


async def test_a_subscriber_waiting_for_an_offset_gets_the_covering_frontier_at_once() -> None:
    """Read-your-writes: a client that waits for an offset is sent the first frontier that
    covers it as soon as it is read, after the deltas of that read, not an interval later;
    the other subscribers keep the coalesced rhythm."""
    interval = 0.3
    hub = Hub(Metrics(), progress_interval=interval)
    waiting, other = attach(hub, "a"), attach(hub, "b")
    # Due: with each key's delta, and the interval starts.
    hub.publish(EPOCH, [delta("0-1", "a"), delta("0-2", "b")], progress("1-0"))
    assert waiting.got[-1] == other.got[-1] == "progress 1-0"
    sub = next(s for s in hub.all if s.sink is waiting)
    hub.wait(sub, {"0": (3, 0)})
    hub.publish(EPOCH, [delta("2-0", "a")], progress("2-0"))  # does not cover 3-0
    assert waiting.got[-1] == "2-0"
    hub.publish(EPOCH, [delta("3-0", "a"), delta("3-1", "b")], progress("3-1"))
    assert waiting.got[-2:] == ["3-0", "progress 3-1"], "sent at once, after its delta"
    assert other.got[-1] == "3-1", "the others still wait for the interval"
    hub.publish(EPOCH, [], progress("4-0"))
    assert waiting.got[-1] == "progress 3-1", "one wait, one early frontier"
    # A wait the frontier already read (not yet sent to all) covers is answered at once.
    hub.wait(sub, {"0": (4, 0)})
    assert waiting.got[-1] == "progress 4-0"
    # A frontier of another partition, or behind it, does not answer a wait.
    hub.wait(sub, {"0": (5, 0), "1": (1, 0)})
    hub.publish(EPOCH, [], progress("6-0"))  # only partition 0
    assert waiting.got[-1] == "progress 4-0"
    await asyncio.sleep(interval * 1.6)
    assert other.got[-1] == waiting.got[-1] == "progress 6-0"
    hub.close()


async def test_waits_end_with_their_subscriber_and_are_bounded() -> None:
    hub = Hub(Metrics(), progress_interval=10)
    waiting = attach(hub, "a")
    sub = next(s for s in hub.all if s.sink is waiting)
    for i in range(100):
        hub.wait(sub, {"0": (10 + i, 0)})
    lane = hub.lanes[VIEWS_FRONTIER]
    assert len(lane.waits[sub]) == 32, "merged beyond the bound"
    hub.publish(EPOCH, [], progress("20-0"))
    assert waiting.got == ["progress 20-0"]
    hub.publish(EPOCH, [], progress("109-0"))  # covers the merged last one
    assert waiting.got[-1] == "progress 109-0" and sub not in lane.waits
    hub.wait(sub, {"0": (200, 0)})
    hub.detach(sub)
    assert sub not in lane.waits
    # A view replaced by a new version: its subscribers' waits were for the old frontier.
    moved = hub.attach("likes", "b", 16)  # buffered: it takes the replacement's notice
    hub.wait(moved, {"0": (300, 0)})
    hub.views_replaced({"likes"}, "e2", "likes@v2")
    assert moved not in lane.waits
    hub.publish(EPOCH, [], progress("300-0"))
    assert moved.progress is None, "an old frontier answered a wait of the new version"
    hub.close()


async def test_a_key_that_did_not_change_is_passed_its_frontier_at_the_quiet_rhythm() -> None:
    """A subscriber handed deltas gets the frontier covering them within the progress
    interval; one whose key did not change gets the newest frontier once per quiet interval,
    so 5k quiet streams are not written to four times a second (docs/PROTOCOL.md, section 4)."""
    interval, quiet = 0.1, 0.6
    hub = Hub(Metrics(), progress_interval=interval, quiet_interval=quiet)
    busy, calm = attach(hub, "a"), attach(hub, "b")
    started = time.monotonic()  # calm's snapshot carried a frontier: its rhythm starts here
    hub.publish(EPOCH, [delta("1-0", "a")], progress("1-0"))
    assert busy.got == ["1-0", "progress 1-0"] and calm.got == []
    hub.publish(EPOCH, [delta("2-0", "a")], progress("2-0"))  # not due: held back
    await asyncio.sleep(interval * 1.7)
    assert busy.got[-1] == "progress 2-0", "owed its deltas' frontier within 1.5 intervals"
    for i in range(3, 6):  # the frontier moves, key b never changes
        hub.publish(EPOCH, [], progress(f"{i}-0"))
        await asyncio.sleep(interval)
    assert calm.got == [], "a quiet key was written to at the fast rhythm"
    assert busy.got[-1] == "progress 2-0", "nothing of its key changed since its frontier"
    while not calm.got:
        assert time.monotonic() - started < quiet * 1.25 + interval, "the quiet sweep never came"
        await asyncio.sleep(0.01)
    assert time.monotonic() - started >= quiet * 0.9
    assert calm.got == ["progress 5-0"], "the sweep passes the newest"
    # The busy key went quiet after its last frontier: a later sweep, a quarter interval on.
    await asyncio.sleep(quiet * 0.25 + interval)
    assert busy.got[-1] == "progress 5-0"
    hub.close()


async def test_a_keys_quiet_rhythm_starts_at_its_first_subscribers_snapshot() -> None:
    """Subscribers that arrive together are not all written to at the next sweep (5k streams
    at once held the gateway ~50 ms): a key's snapshot carried a frontier, so its rhythm starts
    there. A later subscriber of the same key does not start it again for the others."""
    quiet = 1.0
    hub = Hub(Metrics(), progress_interval=0.05, quiet_interval=quiet)
    first = attach(hub, "a")
    started = time.monotonic()
    keys = [attach(hub, f"k{i}") for i in range(50)]
    hub.publish(EPOCH, [], progress("1-0"))
    assert first.got == [] and not any(k.got for k in keys), "written to at the first sweep"
    reads = 1
    while time.monotonic() - started < quiet * 0.8:
        reads += 1
        hub.publish(EPOCH, [], progress(f"{reads}-0"))
        await asyncio.sleep(0.05)
    second = attach(hub, "a")
    while not first.got:
        reads += 1
        hub.publish(EPOCH, [], progress(f"{reads}-0"))
        await asyncio.sleep(0.05)
    waited = time.monotonic() - started
    assert quiet * 0.9 <= waited < quiet * 1.6, "the second subscriber delayed the first's rhythm"
    assert second.got == first.got == [f"progress {reads}-0"]
    for _ in range(8):  # the next sweep, a quarter interval on, at the latest
        reads += 1
        hub.publish(EPOCH, [], progress(f"{reads}-0"))
        await asyncio.sleep(0.05)
    assert all(k.got for k in keys), "a key's subscriber missed its quiet sweep"
    hub.close()


async def test_a_quiet_sweep_passes_each_loose_subscriber_its_own_pipelines_frontier() -> None:
    """A sweep finds the subscribers in no cohort through their key's and their prefix's
    groups, not by a pass over every subscriber: a key's and a prefix's subscribers are passed
    the frontier of the pipeline they follow, a subscriber of another pipeline is not."""
    quiet = 0.4
    hub = Hub(Metrics(), progress_interval=0.05, quiet_interval=quiet,
              frontier_of=lambda view: "likes-p" if view == "likes" else "posts-p")  # fmt: skip
    key = attach(hub, "a")
    prefix = Recorder()
    hub.attach_prefix("likes", "k", 16).sink = prefix
    other = Recorder()
    hub.attach("posts", "a", 16).sink = other
    started = time.monotonic()
    reads = 0
    while not (key.got and prefix.got):
        assert time.monotonic() - started < quiet * 2, "the quiet sweep missed a subscriber"
        reads += 1
        hub.publish(EPOCH, [], progress(f"{reads}-0", "likes-p"))
        await asyncio.sleep(0.05)
    assert key.got == prefix.got == [f"progress {reads}-0"]
    assert other.got == [], "passed the frontier of a pipeline it does not follow"
    hub.close()


async def test_the_keys_a_hub_counts_as_passed_a_frontier_go_with_their_subscribers() -> None:
    """With no reads, no sweep prunes them: a key's entry goes with its last subscriber."""
    hub = Hub(Metrics(), progress_interval=0.1, quiet_interval=60)
    subs = [hub.attach("likes", f"k{i}", 16) for i in range(100)]
    subs.append(hub.attach_prefix("likes", "k", 16))
    lane = hub.lanes[VIEWS_FRONTIER]
    assert len(lane.joined) == 101
    for sub in subs:
        hub.detach(sub)
    assert lane.joined == {}
    hub.close()


async def test_a_wait_on_a_quiet_key_is_answered_from_the_frontier_read_already() -> None:
    """The frontier a quiet subscriber was not passed yet answers its wait at once, and a later
    one that covers the wait reaches it at once too; nobody else is written to for it."""
    hub = Hub(Metrics(), progress_interval=0.1, quiet_interval=60)
    calm, other = attach(hub, "b"), attach(hub, "c")
    hub.publish(EPOCH, [], progress("1-0"))
    hub.publish(EPOCH, [], progress("2-0"))  # read, held for the quiet sweep
    sub = next(s for s in hub.all if s.sink is calm)
    hub.wait(sub, {"0": (2, 0)})
    assert calm.got == ["progress 2-0"]
    hub.wait(sub, {"0": (3, 0)})
    hub.publish(EPOCH, [], progress("3-0"))
    assert calm.got[-1] == "progress 3-0"
    assert other.got == []
    hub.close()


async def test_each_key_takes_the_frontier_with_its_deltas_once_per_interval() -> None:
    await _each_key_takes_the_frontier_with_its_deltas_once_per_interval()


def test_the_hub_times_its_flushes_on_the_gateways_uvloop_too() -> None:
    """uvloop's timer handles do not say when they are due, as asyncio's do."""
    uvloop.run(_each_key_takes_the_frontier_with_its_deltas_once_per_interval())


async def _each_key_takes_the_frontier_with_its_deltas_once_per_interval() -> None:
    """Riding is decided per key: a key not passed a frontier within the interval takes the
    read's frontier with its deltas, in the same write (no frame of its own), however recently
    another key did; one passed a frontier within the interval is owed the newest and gets it
    on its own one and a half intervals later."""
    interval = 0.2
    hub = Hub(Metrics(), progress_interval=interval, quiet_interval=60)
    a, b = attach(hub, "a"), attach(hub, "b")
    hub.publish(EPOCH, [delta("1-0", "a")], progress("1-0"))
    assert a.got == ["1-0", "progress 1-0"] and b.got == []
    await asyncio.sleep(interval * 1.1)
    hub.publish(EPOCH, [delta("2-0", "a")], progress("2-0"))
    hub.publish(EPOCH, [delta("3-0", "b")], progress("3-0"))
    assert a.got[-2:] == ["2-0", "progress 2-0"] and b.got[-2:] == ["3-0", "progress 3-0"]
    hub.publish(EPOCH, [delta("4-0", "b")], progress("4-0"))  # b took one just now: owed
    assert b.got[-1] == "4-0"
    await asyncio.sleep(interval * 1.7)
    assert b.got[-1] == "progress 4-0", "an owed key was not passed its frontier"
    assert a.got[-1] == "progress 2-0", "a key that did not change since took a frame"
    hub.close()


async def test_a_key_stays_owed_until_a_frontier_read_after_its_deltas() -> None:
    """A pipeline in Real-Time Mode writes deltas as records come and its frontier only when an
    epoch ends, in a later read: the key is owed that later frontier, not the one read before
    its deltas (which another key's flush passes on meanwhile), and gets it as soon as it is
    read, not at the quiet rhythm."""
    interval = 0.1
    hub = Hub(Metrics(), progress_interval=interval, quiet_interval=60)
    a, b = attach(hub, "a"), attach(hub, "b")
    hub.publish(EPOCH, [delta("1-0", "a"), delta("1-1", "b")], progress("1-1"))
    hub.publish(EPOCH, [delta("2-0", "b")], progress("2-0"))  # b owed: a flush is timed
    hub.publish(EPOCH, [delta("3-0", "a")], [])  # no frontier with it
    await asyncio.sleep(interval * 2)
    assert b.got[-1] == "progress 2-0"
    hub.publish(EPOCH, [], progress("4-0"))  # the epoch ends
    await asyncio.sleep(interval / 2)
    assert a.got[-1] == "progress 4-0", a.got
    hub.close()
