"""The cuts this gateway process appends for its groups, and when each is reached.

A group of subscriptions is released at cuts (``liveviews.changes.cuts``): positions of the log
at which every pipeline the group's views come from ends a micro-batch. This process appends a
cut when one of its groups has something to release (a member's first frames, a delta, a
client's wait) and no cut is outstanding, naming the pipelines of all its groups. It then
follows every progress entry of those pipelines that the change feed reads, not only each
frontier's newest: once each pipeline's serving version has a batch whose frontier is the cut
(``Reached``), the groups are told which batch that is for each version, and release their
members' deltas up to it (``liveviews.gateway.fanout.group``). A pipeline whose frontier goes
past the cut without stopping at it (a store cluster, where no transaction reads every log
partition at once, can miss one) leaves the cut unreached, and the next one is appended.

A cut is told to the groups only once the change feed has handed out the deltas of the batches
it covers: the feed calls ``progress`` after each read's deltas, and a batch's deltas are in the
change topic before its progress entry.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from liveviews.changes.cuts import (
    CUT_SCRIPT,
    Cut,
    Reached,
    cut_args,
    cut_keys,
    cut_of,
    is_at,
    passed,
)
from liveviews.gateway.feed.store import STORE_ERRORS, Client

log = logging.getLogger("liveviews.gateway.cuts")

RECENT = 64
"""Progress entries kept per pipeline version, to find a cut's batch among those read before
the cut's own answer came back."""
RETRY_S = 1.0
"""The pause before a cut that could not be appended (the store unreachable) is tried again."""


@dataclass(frozen=True)
class Release:
    """A reached cut: its number in this process (``Cuts.sent`` when it was requested), its
    positions, and per pipeline version the batch whose frontier is the cut."""

    seq: int
    cut: Cut
    batches: Mapping[str, int]


class Releasable(Protocol):
    """What a group is to the tracker (``liveviews.gateway.fanout.group.Group``)."""

    def pipelines(self) -> Iterable[str]:
        """The pipelines its views come from."""
        ...

    def release(self, release: Release) -> None:
        """A cut is reached: release what it covers (never awaits)."""
        ...


class Cuts:
    """This process's cuts: one outstanding at a time, for the pipelines of all its groups."""

    def __init__(self, client: Client, partitions: int, refused: str | None = None) -> None:
        self.refused = refused
        """Why this deployment cannot cut its log (None: it can): groups are refused then."""
        self.client = client
        self.script = client.register_script(CUT_SCRIPT)
        self.keys = cut_keys(partitions)
        self.groups: set[Releasable] = set()
        self.sent = 0
        """Cuts requested so far: a frame read now is covered by cut ``sent + 1`` onwards."""
        self.wanted = False
        self.outstanding: Cut | None = None
        self.seq = 0
        self.needed: set[str] = set()
        """The pipeline versions the outstanding cut waits for (``profiles``, ``profiles@v2``)."""
        self.reached: dict[str, int] = {}
        self.missed = False
        self.recent: dict[str, deque[tuple[int, dict[str, str]]]] = {}
        self.task: asyncio.Task[None] | None = None

    def join(self, group: Releasable) -> None:
        self.groups.add(group)

    def leave(self, group: Releasable) -> None:
        self.groups.discard(group)
        if not self.groups:  # nobody waits for the outstanding cut: the next group's own
            self.outstanding = None

    def want(self) -> None:
        """A group has something to release: a cut appended from now on will cover it."""
        self.wanted = True
        if self.outstanding is None and (self.task is None or self.task.done()):
            self.task = asyncio.get_running_loop().create_task(self._append())

    async def _append(self) -> None:
        while self.wanted and self.outstanding is None and self.groups:
            self.wanted = False
            pipelines = sorted({p for g in self.groups for p in g.pipelines()})
            self.sent += 1
            seq = self.sent
            try:
                answer = await self.script(keys=self.keys, args=cut_args(pipelines))
            except STORE_ERRORS as exc:
                log.warning("could not append a cut for the groups: %s", exc)
                self.wanted = True
                await asyncio.sleep(RETRY_S)
                continue
            cut, names, at = cut_of(answer)
            self._await(seq, cut, names, at)

    def _await(self, seq: int, cut: Cut, names: list[str], at: list[Reached]) -> None:
        """Follow ``cut``: reached by each of ``names`` whose frontier is it already, or was it
        in a progress entry read before this answer."""
        self.outstanding, self.seq, self.needed, self.missed = cut, seq, set(names), False
        self.reached = {r.name: r.batch for r in at if is_at(r.frontier, cut)}
        for name in self.needed - set(self.reached):
            for batch, frontier in self.recent.get(name, ()):
                if is_at(frontier, cut):
                    self.reached[name] = batch
        # A frontier past the cut already, without a batch that ended there, missed it: it
        # read past it before the cut was appended (a store cluster; never on one server).
        self.missed = any(r.name not in self.reached and passed(r.frontier, cut) for r in at)
        self._settle()

    def progress(self, entries: Iterable[tuple[str, int, dict[str, str]]]) -> None:
        """Every progress entry of one read of the change feed, in order, after its deltas:
        (pipeline version, batch, frontier)."""
        cut = self.outstanding
        for name, batch, frontier in entries:
            self.recent.setdefault(name, deque(maxlen=RECENT)).append((batch, frontier))
            if cut is None or name not in self.needed or name in self.reached:
                continue
            if is_at(frontier, cut):
                self.reached[name] = batch
            elif passed(frontier, cut):
                self.missed = True
        if cut is not None:
            self._settle()

    def _settle(self) -> None:
        cut = self.outstanding
        if cut is None:
            return
        if self.missed:
            log.info("a pipeline went past cut %s without ending a batch there", cut.id)
            self.outstanding = None
            self.want()
        elif self.needed <= set(self.reached):
            self.outstanding = None
            release = Release(self.seq, cut, dict(self.reached))
            for group in list(self.groups):
                group.release(release)
            if self.wanted:
                self.want()
