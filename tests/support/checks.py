"""Checks of the change topic against the views and against an offline recomputation."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection
from typing import Any

import orjson
import redis

from liveviews.app import App
from liveviews.changes.topic import (
    Delta,
    changes_stream,
    positions_key,
    read_deltas,
    rows_key,
    shard_for,
    view_key,
)
from liveviews.log.events import LoggedEvent
from liveviews.pipeline.versions import active_namespaces
from tests.support.reference import Views, recompute


def stored_views(client: redis.Redis, shards: int) -> Views:
    out: Views = {}
    for shard in range(shards):
        prefix = rows_key(shard, "", "")[: -len("/")]
        for raw in client.scan_iter(match=f"{prefix}*", count=1000):
            name = raw.decode()[len(prefix) :]
            view, _, key = name.partition("/")
            rows: dict[bytes, bytes] = client.hgetall(raw)  # type: ignore[assignment]
            if rows:
                out[(view, key)] = {r.decode(): orjson.loads(v) for r, v in rows.items()}
    return out


def replayed_views(
    client: redis.Redis, shards: int, *, streamed: Collection[str] = (),
    pipelines: Collection[str] | None = None,
) -> tuple[Views, int]:  # fmt: skip
    """State rebuilt by applying every delta in order (of ``pipelines`` only, if given: names
    as deltas carry them, ``<pipeline>[@<version>]``); fails on any duplicate delta.

    ``streamed``: pipelines that run in Real-Time Mode, whose deltas come several per key in one
    epoch, one per change as it came; each must then change the state it applies to (a delta
    written twice would not), and a key's epochs never go back."""
    state: dict[tuple[str, str], dict[str, Any]] = defaultdict(dict)
    seen: set[tuple[str, int, str, str]] = set()
    count = 0
    for shard in range(shards):
        last = "-"
        newest: dict[tuple[str, str], Delta] = {}
        while True:
            deltas = read_deltas(client, shard, after=last)
            if not deltas:
                break
            for d in deltas:
                if pipelines is not None and d.pipeline not in pipelines:
                    continue
                assert shard_for(d.view, d.key, shards) == shard, f"delta in wrong shard: {d}"
                streaming = d.pipeline.partition("@")[0] in streamed
                ident = (d.pipeline, d.batch, d.view, d.key)
                assert streaming or ident not in seen, f"duplicate delta for batch {d.batch}: {d}"
                assert d.ops, f"empty delta: {d}"
                before = newest.get((d.view, d.key))
                if before is not None and before.pipeline == d.pipeline:
                    assert d.batch > before.batch or (streaming and d.batch == before.batch), (
                        f"delta of an older batch after {before}: {d}"
                    )
                seen.add(ident)
                newest[(d.view, d.key)] = d
                rows = state[(d.view, d.key)]
                was = dict(rows)
                d.apply(rows)
                assert not streaming or rows != was, f"a delta that changes nothing: {d}"
                count += 1
            last = deltas[-1].id
        assert client.xlen(changes_stream(shard)) >= 0
        _assert_positions(client, shard, newest)
    return {k: v for k, v in state.items() if v}, count


def _assert_positions(
    client: redis.Redis, shard: int, newest: dict[tuple[str, str], Delta]
) -> None:
    """Each key's recorded position is its newest delta: a snapshot read at that position
    is followed by exactly the deltas after it, none missing (no gap) and none already in it."""
    positions: dict[bytes, bytes] = client.hgetall(positions_key(shard))  # type: ignore[assignment]
    recorded = {k.decode(): v.decode() for k, v in positions.items()}
    for (view, key), d in newest.items():
        name = view_key(view, key)
        assert recorded.get(name) == d.id, (
            f"{name}: position {recorded.get(name)} is not its newest delta {d.id}"
        )


def assert_views_consistent(
    client: redis.Redis,
    partitions: int,
    shards: int,
    skip: Collection[str] = (),
    streamed: Collection[str] = (),
    log: list[list[LoggedEvent]] | None = None,
) -> int:
    """Stored views == offline recomputation (less the ``skip`` offsets; from ``log`` when the
    log is not the store's) == replay of the change topic (``streamed``: pipelines in Real-Time
    Mode, see ``replayed_views``). Returns #deltas."""
    stored = stored_views(client, shards)
    expected = recompute(client, partitions, skip, log)
    replayed, count = replayed_views(client, shards, streamed=streamed)
    _assert_same("stored views", stored, "recomputation", expected)
    _assert_same("replayed deltas", replayed, "stored views", stored)
    return count


def assert_served_views_consistent(
    client: redis.Redis, app: App, partitions: int, shards: int,
    log: list[list[LoggedEvent]] | None = None,
) -> int:  # fmt: skip
    """``assert_views_consistent`` for the versions readers are served after a rebuild: each
    view under its pipeline's active namespace (``@<version>``); a replaced version's state,
    kept for its grace period, is left out. The replay of the change topic is compared for
    the pipelines never rebuilt: a rebuilt version's deltas and positions follow the rules of
    the switch, which the rebuild tests check. Returns #deltas."""
    active = active_namespaces(client)
    served = {view + active.get(name, ""): view
              for name, pipeline in app.pipelines.items() for view in pipeline.views}  # fmt: skip
    stored = {(served[v], k): rows for (v, k), rows in stored_views(client, shards).items()
              if v in served}  # fmt: skip
    _assert_same("stored views", stored, "recomputation", recompute(client, partitions, (), log))
    never_rebuilt = [name for name in app.pipelines if not active.get(name)]
    replayed, count = replayed_views(client, shards, pipelines=never_rebuilt)
    views = {v for name in never_rebuilt for v in app.pipelines[name].views}
    _assert_same("replayed deltas", replayed, "stored views",
                 {k: r for k, r in stored.items() if k[0] in views})  # fmt: skip
    return count


def _assert_same(a_name: str, a: Views, b_name: str, b: Views) -> None:
    missing = sorted(set(b) - set(a))[:5]
    extra = sorted(set(a) - set(b))[:5]
    assert not missing, f"{a_name} lack {missing} present in {b_name}"
    assert not extra, f"{a_name} have {extra} absent from {b_name}"
    for k in sorted(b):
        assert a[k] == b[k], f"{k}: {a_name} {a[k]!r} != {b_name} {b[k]!r}"


def topic_positions(
    client: redis.Redis, view: str, key: str, shards: int, after: str = "-"
) -> list[str]:
    """The positions (``ms-seq``) of the change topic's deltas for (view, key) after ``after``:
    what a subscriber whose snapshot is at ``after`` must receive, in this order."""
    shard = shard_for(view, key, shards)
    out: list[str] = []
    while True:
        deltas = read_deltas(client, shard, after=after)
        if not deltas:
            return out
        out += [d.id for d in deltas if (d.view, d.key) == (view, key)]
        after = deltas[-1].id


def assert_delivered_exactly(
    client: redis.Redis, name: str, view: str, key: str, shards: int,
    snapshot_id: str, delta_ids: list[str],
) -> None:  # fmt: skip
    """A subscriber's deltas (event ids) are the change topic's for its key after its snapshot
    (an event id ``<epoch>.<position>``): none missing, none twice, none out of order."""
    got = [i.rsplit(".", 1)[1] for i in delta_ids]
    want = topic_positions(client, view, key, shards, snapshot_id.rsplit(".", 1)[1])
    missing = sorted(set(want) - set(got))[:5]
    extra = sorted(set(got) - set(want))[:5]
    assert got == want, (
        f"{name}: {len(got)} deltas received, the change topic holds {len(want)} after the "
        f"snapshot at {snapshot_id}; missing {missing}, not in the topic {extra}"
    )
