"""The change topic format: the one place that names its keys and reads its entries.

The change topic is S Redis Streams ("shards"); a (view, key) always lands in the shard
``crc32("<view>/<key>") % S``, so its deltas are totally ordered. Everything about one shard
shares a hash tag, so on a Redis Cluster it lives on one node and is written atomically:

``lv:{c<s>}:changes``           stream of deltas: fields view, key, ops (JSON), pipeline, batch
``lv:{c<s>}:rows:<view>/<key>``  hash row id -> JSON value: the served state
``lv:{c<s>}:pos``               hash "<view>/<key>" -> entry id of its latest delta
``lv:{c<s>}:cand:<view>/<key>``  hash of candidate rows (views with a limit)
``lv:{c<s>}:rank:<view>/<key>``  sorted set of candidate scores (views with a limit)
``lv:{c<s>}:keys:<view>/``       sorted set of the view's keys with rows (listable views)
``lv:{c<s>}:batches``           hash pipeline -> last micro-batch applied to this shard
``lv:{c<s>}:live``              hash pipeline -> namespace whose deltas this shard publishes

Each version of a pipeline writes under a namespace (``liveviews.pipeline.versions``): ``""`` for
the first version a store ever ran, ``"@<version>"`` for every later one. A view's rows live
under ``<view><namespace>`` (``rows:likes@v2/alice``), a delta's ``view`` field is that name, and
the pipeline's frontier, batches and progress entries are named ``<pipeline><namespace>``.
``lv:{m}:active`` maps each pipeline to the namespace readers are served from; a version being
built writes its rows without deltas until readers are switched to it.

Per pipeline, ``lv:{m}:frontier`` holds the log offsets its views reflect; its field ``liveviews``
holds, per log partition, the oldest of them, which every view reflects. Every advance of a
pipeline's field, and of ``liveviews``, is also appended to the ``lv:{m}:progress`` stream (fields
pipeline, batch, frontier); a view's subscribers follow the field of the pipeline writing it.
A delta's ``ops`` is a JSON array of ``{"op": "upsert", "row": id, "value": v}`` and
``{"op": "delete", "row": id}``.

This module does not import Spark: the gateway reads the change topic through it.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any

import orjson

from liveviews.store.client import Client

FRONTIER_KEY = "lv:{m}:frontier"
FRONTIER_BATCHES_KEY = "lv:{m}:frontier:batches"
FRONTIER_LAG_KEY = "lv:{m}:frontier:lag"
"""Hash pipeline version -> ms its frontier was behind the log's head at its last batch."""
HISTORY_RETENTION = 100_000
PROGRESS_STREAM = "lv:{m}:progress"
WANTS_STREAM = "lv:{m}:wants"
"""Log positions clients wait for their views to reflect (``reflects()``), told by the gateway
to pipelines in Real-Time Mode, whose source then ends its epoch once past them instead of at
its interval (``io.liveviews.spark.LogTailReader``): their frontier moves only at epochs' ends."""
WANTS_MAXLEN = 1_000
STREAM_WAITS_STREAM = "lv:{m}:waits"
"""Waits posted for SSE streams (``POST /v1/streams/{stream}/wait``), which every gateway process
reads with the change topic and passes to the streams it holds
(``liveviews.gateway.feed.waits``)."""
STREAM_WAITS_MAXLEN = 10_000
ACTIVE_KEY = "lv:{m}:active"
"""Hash pipeline -> the namespace of the version that serves readers (absent: ``""``)."""
VIEWS_FRONTIER = "liveviews"
"""The field of ``lv:{m}:frontier`` that every view reflects: per partition, the oldest
pipeline's."""
NO_POSITION = "0-0"


def physical(view: str, namespace: str) -> str:
    """The name a version of ``view`` is stored under: ``likes``, ``likes@v2``."""
    return view + namespace


def split_physical(name: str) -> tuple[str, str]:
    """``"likes@v2"`` -> ``("likes", "@v2")``; ``"likes"`` -> ``("likes", "")``."""
    view, at, version = name.partition("@")
    return view, at + version


def view_key(view: str, key: str) -> str:
    return f"{view}/{key}"


def shard_for(view: str, key: str, shards: int) -> int:
    return zlib.crc32(view_key(view, key).encode()) % shards


def _tag(shard: int) -> str:
    return f"lv:{{c{shard}}}"


def changes_stream(shard: int) -> str:
    return f"{_tag(shard)}:changes"


def batches_key(shard: int) -> str:
    return f"{_tag(shard)}:batches"


def positions_key(shard: int) -> str:
    return f"{_tag(shard)}:pos"


def rows_key(shard: int, view: str, key: str) -> str:
    return f"{_tag(shard)}:rows:{view_key(view, key)}"


def history_stream(pipeline: str) -> str:
    """One entry per batch of a pipeline version: its ``batch`` and the ``frontier`` it left,
    the last ``HISTORY_RETENTION`` of them: which batch reflected a log offset."""
    return f"lv:{{m}}:history:{pipeline}"


def realtime_attempts_key(pipeline: str, epoch: int) -> str:
    """The writer partitions that started an epoch of a pipeline version in Real-Time Mode
    (``io.liveviews.spark.ChangeTopicKeys.attempts``): one finding itself there runs it again."""
    return f"lv:{{m}}:realtime:{pipeline}:{epoch}"


def live_key(shard: int) -> str:
    return f"{_tag(shard)}:live"


def candidates_key(shard: int, view: str, key: str) -> str:
    return f"{_tag(shard)}:cand:{view_key(view, key)}"


def rank_key(shard: int, view: str, key: str) -> str:
    return f"{_tag(shard)}:rank:{view_key(view, key)}"


def index_key(shard: int, view: str) -> str:
    """The keys of ``view`` (a listable one) that have rows in this shard, all of score 0, so
    that a prefix is a range (ZRANGEBYLEX). It ends in ``/`` like every key of a view's
    version, so that deleting a replaced version's keys finds it too."""
    return f"{_tag(shard)}:keys:{view}/"


@dataclass(frozen=True)
class Delta:
    """One atomic change to one (view, key), at a position in its shard's stream, written by
    the version of the view stored under ``namespace``."""

    id: str
    view: str
    key: str
    ops: list[dict[str, Any]]
    pipeline: str
    batch: int
    namespace: str = ""

    def apply(self, rows: dict[str, Any]) -> None:
        for op in self.ops:
            if op["op"] == "upsert":
                rows[op["row"]] = op["value"]
            else:
                rows.pop(op["row"], None)


def decode_delta(entry_id: bytes | str, fields: dict[bytes, bytes]) -> Delta:
    view, namespace = split_physical(fields[b"view"].decode())
    return Delta(
        id=entry_id.decode() if isinstance(entry_id, bytes) else entry_id,
        view=view,
        namespace=namespace,
        key=fields[b"key"].decode(),
        ops=orjson.loads(fields[b"ops"]),
        pipeline=fields[b"pipeline"].decode(),
        batch=int(fields[b"batch"]),
    )


@dataclass(frozen=True)
class Snapshot:
    """The rows of a (view, key) and the shard position they reflect.

    Every delta of this (view, key) after ``position`` in its shard's stream is newer than the
    rows; every delta up to it is already in them.
    """

    view: str
    key: str
    rows: dict[str, Any]
    position: str
    last_change: str | None


def read_snapshot(
    client: Client, view: str, key: str, shards: int, namespace: str = ""
) -> Snapshot:
    """The rows of the version of ``view`` stored under ``namespace``."""
    shard = shard_for(view, key, shards)
    name = physical(view, namespace)
    with client.pipeline(transaction=True) as pipe:
        pipe.hgetall(rows_key(shard, name, key))
        pipe.hget(positions_key(shard), view_key(name, key))
        pipe.xrevrange(changes_stream(shard), count=1)
        rows, last, head = pipe.execute()
    return Snapshot(
        view=view,
        key=key,
        rows={r.decode(): orjson.loads(v) for r, v in rows.items()},
        position=head[0][0].decode() if head else NO_POSITION,
        last_change=last.decode() if last else None,
    )


def read_frontier(client: Client, pipeline: str) -> dict[int, str]:
    raw = client.hget(FRONTIER_KEY, pipeline)
    return {int(p): i for p, i in orjson.loads(raw).items()} if raw else {}


def read_deltas(client: Client, shard: int, after: str = "-", count: int = 10_000) -> list[Delta]:
    """Deltas of one shard after an entry id (exclusive), oldest first."""
    start = "-" if after in ("-", NO_POSITION) else f"({after}"
    entries: Any = client.xrange(changes_stream(shard), start, "+", count)
    return [decode_delta(i, f) for i, f in entries]
