"""Cuts: log positions at which every pipeline of a group of views ends a micro-batch.

A client that follows several views as one group must never be shown one view reflecting an
event that another does not reflect yet. Each view follows the frontier of the pipeline that
writes it, and each pipeline cuts the log into micro-batches at its own pace, so two pipelines'
frontiers seldom pass through the same position, and a state that both views have at one
position of the log is never written down. A cut is such a position, chosen for them: every
log partition's head, read at one instant (``cut.lua``) and appended with the names of the
pipelines it is for to ``lv:{m}:cuts``. Each of those pipelines' sources then ends a batch
exactly at the cut instead of reading past it (``end_at_cut``), so each frontier passes through
it, and once all of them have, every view of the group is known as of that position.

A cut costs each pipeline it names one more micro-batch at most (the one that ends there), and
only while someone waits on it: the gateway appends one when a group has changes to release,
and the next only once the pipelines have reached the last.

This module does not import Spark: the gateway appends cuts through it, the source reads them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any

import orjson

from liveviews.log.events import entry_id_tuple, log_stream

CUTS_STREAM = "lv:{m}:cuts"
CUTS_MAXLEN = 100
"""Only the newest cuts matter: a source reads ``CUTS_READ`` of them with its next batch."""
CUTS_READ = 16
FIELD_PIPELINES = "pipelines"
"""The cut's pipelines, comma-separated; every other field is a log partition's position."""
NO_POSITION = "0-0"
CUT_SCRIPT = resources.files("liveviews.changes").joinpath("cut.lua").read_text()


@dataclass(frozen=True)
class Cut:
    """Where the pipelines ``pipelines`` must each end a micro-batch: per log partition (its
    number as text, as the source's offsets have it), the entry id the batch ends at."""

    id: str
    pipelines: frozenset[str]
    positions: Mapping[str, str]

    def at(self, partition: str) -> str:
        return self.positions.get(partition, NO_POSITION)


def decode(entries: Iterable[Any]) -> list[Cut]:
    """The cuts of an ``XREVRANGE`` of ``CUTS_STREAM`` (newest first), oldest first."""
    cuts = []
    for entry_id, fields in entries:
        text = {_text(k): _text(v) for k, v in fields.items()}
        pipelines = frozenset(p for p in text.pop(FIELD_PIPELINES, "").split(",") if p)
        cuts.append(Cut(_text(entry_id), pipelines, text))
    cuts.reverse()
    return cuts


def cut_keys(partitions: int) -> list[str]:
    """``cut.lua``'s keys: the cuts stream, the frontiers and their batches, the serving
    versions, then every log partition in order."""
    from liveviews.changes.topic import ACTIVE_KEY, FRONTIER_BATCHES_KEY, FRONTIER_KEY

    return [CUTS_STREAM, FRONTIER_KEY, FRONTIER_BATCHES_KEY, ACTIVE_KEY,
            *(log_stream(p) for p in range(partitions))]  # fmt: skip


def cut_args(pipelines: Iterable[str]) -> list[Any]:
    return [CUTS_MAXLEN, *sorted(pipelines)]


@dataclass(frozen=True)
class Reached:
    """Where a pipeline version's frontier was: its name (``profiles``, ``profiles@v2``), the
    frontier (partition -> entry id) and the batch that wrote it."""

    name: str
    frontier: Mapping[str, str]
    batch: int


def cut_of(answer: Any) -> tuple[Cut, list[str], list[Reached]]:
    """The cut ``cut.lua`` appended, the serving version of each of its pipelines, and where
    those that wrote a frontier already were when it did."""
    entry_id, flat, at = answer
    cut = decode([(entry_id, dict(zip(flat[::2], flat[1::2], strict=True)))])[0]
    names, reached = [], []
    for name, frontier, batch in zip(at[::3], at[1::3], at[2::3], strict=True):
        names.append(_text(name))
        if frontier and batch:
            positions = {str(p): str(i) for p, i in orjson.loads(frontier).items()}
            reached.append(Reached(_text(name), positions, int(batch)))
    return cut, names, reached


def is_at(frontier: Mapping[str, str], cut: Cut) -> bool:
    """Is ``frontier`` exactly ``cut``, partition by partition (a missing one is at 0-0)?"""
    parts = set(frontier) | set(cut.positions)
    return all(entry_id_tuple(frontier.get(p, NO_POSITION)) == entry_id_tuple(cut.at(p))
               for p in parts)  # fmt: skip


def passed(frontier: Mapping[str, str], cut: Cut) -> bool:
    """Has ``frontier`` gone past ``cut`` in some partition?"""
    return any(entry_id_tuple(at) > entry_id_tuple(cut.at(p)) for p, at in frontier.items())


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def next_cut(pipeline: str, start: Mapping[str, str], cuts: Iterable[Cut]) -> Cut | None:
    """The oldest cut for ``pipeline`` that a batch from ``start`` has not passed: at or after
    ``start`` in every partition, and after it in one. A cut the pipeline passed already (it was
    appended while a batch that reads past it was planned) is of no use to it any more."""
    for cut in cuts:
        if pipeline not in cut.pipelines:
            continue
        partitions = set(start) | set(cut.positions)
        begun = [(entry_id_tuple(cut.at(p)), entry_id_tuple(start.get(p, NO_POSITION)))
                 for p in partitions]  # fmt: skip
        if all(at >= s for at, s in begun) and any(at > s for at, s in begun):
            return cut
    return None


def end_at_cut(
    pipeline: str, start: Mapping[str, str], end: Mapping[str, str], cuts: Iterable[Cut]
) -> dict[str, str]:
    """``end``, a batch's end from ``start``, brought back to the next cut for ``pipeline`` in
    every partition where it would read past it, so the batch ends at the cut (or short of it,
    when ``end`` was short of it: a later batch then ends there)."""
    cut = next_cut(pipeline, start, cuts)
    if cut is None:
        return dict(end)
    return {p: cut.at(p) if entry_id_tuple(at) > entry_id_tuple(cut.at(p)) else at
            for p, at in end.items()}  # fmt: skip


def before_cut(position: str, partition: str, cut: Cut | None) -> bool:
    """Whether an entry at ``position`` of ``partition`` may be in a batch that ends at or
    before ``cut`` (always, without one)."""
    return cut is None or entry_id_tuple(position) <= entry_id_tuple(cut.at(partition))
