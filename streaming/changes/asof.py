"""A key's rows as they were when its view reflected a log offset: the one place that reads
a view's past.

A pipeline version records each committed micro-batch, with the frontier it left, on
``lv:{m}:history:<pipeline><namespace>`` (``liveviews.changes.topic.history_stream``). The rows of a
(view, key) as of an offset are those after the first batch whose frontier covers the offset:
every delta of the key that the serving version wrote in that batch or before, replayed from
the start of the key's change-topic shard.

That is exact only while the store still holds all of it, so the answer is "history that old
is gone" (``HistoryGone``) when:

- the first batch that covered the offset is no longer on the history stream (trimmed, or
  written before the store kept one);
- the shard's stream was trimmed since the version began (``LV_CHANGE_RETENTION``), so early
  deltas of the key may be missing;
- the version did not publish deltas from its first batch: a rebuilt version writes its rows
  without deltas until it serves readers, so its rows before that cannot be replayed.

Spark-free and synchronous: the command line calls it, and the gateway calls it in a thread.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson
import redis

from liveviews.app import App
from liveviews.changes.topic import (
    Delta,
    changes_stream,
    decode_delta,
    history_stream,
    physical,
    read_frontier,
    shard_for,
)
from liveviews.errors import LiveviewsError
from liveviews.log.events import Offset, entry_id_tuple
from liveviews.pipeline import versions
from liveviews.store.client import Client

PAGE = 1000
"""Entries read per round trip from a history or change-topic stream."""


class HistoryGone(LiveviewsError):
    """The store no longer holds what replaying the key up to that offset needs."""

    code = "history_gone"


class NotReflected(LiveviewsError):
    """The view does not reflect the offset yet."""

    code = "not_reflected"


class UnknownView(LiveviewsError):
    code = "unknown_view"


@dataclass(frozen=True)
class Serving:
    """The version of a pipeline that serves readers."""

    pipeline: str
    version: str | None
    """None for a store whose pipeline has not registered a version yet."""
    namespace: str
    started_ms: int
    """When the version began (0 for the store's first version, which may predate versions)."""

    @property
    def qualified(self) -> str:
        return self.pipeline + self.namespace


def serving(client: Client, pipeline: str) -> Serving:
    reg = versions.read(client, pipeline)
    if reg is None or reg.active is None:
        namespace = versions.active_namespaces(client).get(pipeline, "")
        return Serving(pipeline, None, namespace, 0)
    active = reg.active
    started = 0 if not active.namespace else int(active.started * 1000)
    return Serving(pipeline, active.version, active.namespace, started)


def owner(app: App, view: str) -> str:
    """The pipeline that writes ``view``; ``UnknownView`` with the views' names otherwise."""
    pipeline = app.owner_of(view) if view in app.views else None
    if pipeline is None:
        names = ", ".join(sorted(v for v in app.views if app.owner_of(v))) or "none"
        raise UnknownView(f"there is no view {view!r} written by a pipeline; views: {names}.")
    return pipeline


# -- which batch first reflected an offset ------------------------------------------------------


@dataclass(frozen=True)
class Batch:
    """One entry of a version's history: a committed micro-batch and the frontier it left."""

    id: str
    batch: int
    frontier: dict[str, str]

    def covers(self, offset: Offset) -> bool:
        at = self.frontier.get(str(offset.partition))
        return at is not None and entry_id_tuple(at) >= entry_id_tuple(offset.id)


def _batch(entry: Any) -> Batch:
    entry_id, fields = entry
    return Batch(entry_id.decode(), int(fields[b"batch"]), orjson.loads(fields[b"frontier"]))


def _trimmed(info: dict[str, Any]) -> bool:
    """Has the stream lost entries (trimmed, or deleted one by one)?"""
    added = info.get("entries-added")
    return added is not None and int(added) > int(info["length"])


def _info(client: Client, stream: str) -> dict[str, Any] | None:
    try:
        info: Any = client.xinfo_stream(stream)
    except redis.ResponseError:  # no such key
        return None
    return dict(info)


def _pages(client: Client, stream: str, start: str = "-") -> Iterator[Any]:
    """A stream's entries from ``start`` (inclusive) on, read ``PAGE`` at a time."""
    while True:
        entries: Any = client.xrange(stream, start, "+", count=PAGE)
        yield from entries
        if len(entries) < PAGE:
            return
        start = f"({entries[-1][0].decode()}"


def covering_batch(client: Client, qualified: str, offset: Offset) -> Batch:
    """The first batch of the pipeline version ``qualified`` whose frontier covers ``offset``."""
    stream = history_stream(qualified)
    info = _info(client, stream)
    if info is None or not info.get("length"):
        at = read_frontier(client, qualified).get(offset.partition)
        if at is not None and entry_id_tuple(at) >= entry_id_tuple(offset.id):
            raise HistoryGone(
                f"{qualified} reflects {offset} but keeps no history of its batches, so its "
                "rows as of that offset are gone; ask for a later offset."
            )
        raise NotReflected(f"{qualified} does not reflect {offset} yet; try again shortly.")
    first, last = _batch(info["first-entry"]), _batch(info["last-entry"])
    if not last.covers(offset):
        raise NotReflected(
            f"{qualified} does not reflect {offset} yet (its last batch, {last.batch}, reads to "
            f"{_frontier_text(last.frontier)}); try again shortly."
        )
    if first.covers(offset):
        # Exact only when nothing before the first entry was ever recorded.
        if first.batch == 0 and not _trimmed(info):
            return first
        raise HistoryGone(
            f"history that old is gone: {offset} was reflected by a batch of {qualified} before "
            f"{first.batch}, the oldest it keeps; ask for an offset it reflected later."
        )
    # The batch that first covered the offset was committed after the event was appended, and
    # both ids come from the store's clock: start there rather than at the first batch.
    start = max(first.id, f"{entry_id_tuple(offset.id)[0]}-0", key=entry_id_tuple)
    found = next((b for b in map(_batch, _pages(client, stream, start)) if b.covers(offset)), None)
    if found is not None:
        before: Any = client.xrevrange(stream, f"({found.id}", "-", count=1)
        if not before or not _batch(before[0]).covers(offset):
            return found
    # The clocks disagreed (ids written ahead of time): read the whole history.
    for b in map(_batch, _pages(client, stream)):
        if b.covers(offset):
            return b
    raise NotReflected(f"{qualified} does not reflect {offset} yet; try again shortly.")


def _frontier_text(frontier: dict[str, str]) -> str:
    return ", ".join(f"{p}:{i}" for p, i in sorted(frontier.items())) or "nothing"


# -- replaying a key's deltas ------------------------------------------------------------------


@dataclass
class Replay:
    """What one pass over a shard's stream found for a version and a key."""

    deltas: list[Delta] = field(default_factory=list)
    first_batch: int | None = None
    """The batch of the version's oldest delta in the shard (None: it has none there)."""


def replay_deltas(
    client: Client, shards: int, view: str, key: str, server: Serving, upto: int
) -> list[Delta]:
    """Every delta of (``view``, ``key``) the version wrote in batch ``upto`` or before, oldest
    first, or ``HistoryGone`` when the shard no longer holds all of them."""
    shard = shard_for(view, key, shards)
    stream = changes_stream(shard)
    info = _info(client, stream)
    if info is not None and _trimmed(info):
        first_id = info["first-entry"][0].decode() if info.get("first-entry") else "0-0"
        deleted = (info.get("max-deleted-entry-id") or b"0-0").decode()
        since = (server.started_ms, 0)
        if entry_id_tuple(first_id) > since or entry_id_tuple(deleted) >= since:
            raise HistoryGone(
                f"history that old is gone: the change topic no longer holds every delta of "
                f"{view}/{key} since {server.qualified} began (LV_CHANGE_RETENTION keeps the "
                "newest of each shard); ask for a later offset once it holds them."
            )
    found = _scan(client, stream, physical(view, server.namespace), key, server, upto)
    first = _first_batch(client, server)
    published_from_start = not server.namespace or (
        found.first_batch is not None and first is not None and found.first_batch <= first
    )
    if not published_from_start:
        raise HistoryGone(
            f"history that old is gone: {server.qualified} was rebuilt beside the version "
            "before it and publishes deltas only since it began serving readers, so its rows "
            "as of an earlier batch cannot be replayed."
        )
    return found.deltas


def _scan(client: Client, stream: str, name: str, key: str, server: Serving, upto: int) -> Replay:
    out = Replay()
    pipeline = server.qualified.encode()
    wanted = (name.encode(), key.encode())
    for entry_id, fields in _pages(client, stream):
        if fields.get(b"pipeline") != pipeline:
            continue
        batch = int(fields[b"batch"])
        if out.first_batch is None:
            out.first_batch = batch
        if batch > upto:
            break  # a version's deltas come in batch order in each shard
        if (fields[b"view"], fields[b"key"]) == wanted:
            out.deltas.append(decode_delta(entry_id, fields))
    return out


def _first_batch(client: Client, server: Serving) -> int | None:
    """The version's first batch, as its history recorded it (None: not recorded, or trimmed
    since)."""
    info = _info(client, history_stream(server.qualified))
    if info is None or not info.get("first-entry") or _trimmed(info):
        return None
    return _batch(info["first-entry"]).batch


# -- the answer ------------------------------------------------------------------------------


@dataclass(frozen=True)
class AsOf:
    """The rows of (view, key) right after the batch that first reflected ``offset``."""

    view: str
    key: str
    offset: Offset
    serving: Serving
    batch: Batch
    rows: dict[str, Any]
    deltas: list[Delta]
    """The key's deltas replayed to build ``rows``, oldest first."""

    def to_dict(self, last: int = 10) -> dict[str, Any]:
        """What ``liveviews inspect --json --as-of`` prints and the operator endpoint answers;
        ``last``: how many of the replayed deltas to list, newest first."""
        recent = self.deltas[::-1][: max(last, 0)]
        return {
            "view": self.view,
            "key": self.key,
            "pipeline": self.serving.pipeline,
            "version": self.serving.version,
            "as_of": {
                "offset": str(self.offset),
                "batch": self.batch.batch,
                "frontier": self.batch.frontier,
            },
            "rows": self.rows,
            "position": {"last_change": self.deltas[-1].id if self.deltas else None},
            "deltas": [{"id": d.id, "batch": d.batch, "ops": d.ops} for d in recent],
        }


def parse_offset(token: str, partitions: int) -> Offset:
    """``<partition>:<entry id>``, as ``POST /v1/events`` answers it."""
    offset = Offset.parse(token)
    if not 0 <= offset.partition < partitions:
        raise LiveviewsError(
            f"offset {token!r} names partition {offset.partition}; the log has partitions 0 to "
            f"{partitions - 1}.",
            code="invalid_offset",
        )
    return offset


def rows_as_of(client: Client, app: App, shards: int, view: str, key: str, offset: Offset) -> AsOf:
    """The rows of (``view``, ``key``) in the serving version as of ``offset``."""
    server = serving(client, owner(app, view))
    batch = covering_batch(client, server.qualified, offset)
    deltas = replay_deltas(client, shards, view, key, server, batch.batch)
    rows: dict[str, Any] = {}
    for d in deltas:
        d.apply(rows)
    return AsOf(view, key, offset, server, batch, rows, deltas)
