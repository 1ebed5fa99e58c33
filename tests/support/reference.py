"""Chirp's views recomputed offline from the whole log, in plain Python.

Independent of the Spark code on purpose: it shares only the log format (``liveviews.log.events``)
and the written definition of each view, so a bug in the pipeline cannot hide in both.

Which late events ``activity`` drops depends on where its micro-batches were cut (Spark's
watermark moves between them), so for that view the recomputation also reads the cuts: the
log offsets each batch of the ``activity`` pipeline ended at, as its sink recorded them on the
pipeline's history stream. It applies Spark's rule to them itself.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import defaultdict
from collections.abc import Collection
from datetime import UTC, datetime
from typing import Any

import orjson
import redis

from liveviews.changes.topic import ACTIVE_KEY, history_stream
from liveviews.log.events import LoggedEvent, decode_entry, entry_id_tuple, log_stream

Views = dict[tuple[str, str], dict[str, Any]]  # (view, key) -> rows


def _iso(ms: int) -> str:
    return (
        datetime.fromtimestamp(ms / 1000, UTC)
        .isoformat(timespec="milliseconds")
        .replace("+00:00", "Z")
    )


def read_log(client: redis.Redis, partitions: int, skip: Collection[str] = ()) -> list[list[Any]]:
    """Every partition's events, in log order, less the offsets (``p:id``) in ``skip``."""
    out = []
    for p in range(partitions):
        entries: list[tuple[bytes, dict[bytes, bytes]]] = client.xrange(log_stream(p))  # type: ignore[assignment]
        out.append([decode_entry(p, i, f) for i, f in entries if f"{p}:{i.decode()}" not in skip])
    return out


def recompute(
    client: redis.Redis,
    partitions: int,
    skip: Collection[str] = (),
    log: list[list[LoggedEvent]] | None = None,
) -> Views:
    """The views from the log; ``skip``: offsets of bad entries the test wrote, which the
    views must leave out; ``log``: each partition's events when the log is not the store's
    (a Kafka log), else they are read from the store."""
    if log is None:
        log = read_log(client, partitions, skip)
    profiles: dict[str, tuple[str, Any]] = {}
    tweets: dict[str, tuple[str, str, int]] = {}  # tweet -> (author, text, posted_at)
    likers: dict[str, set[str]] = defaultdict(set)
    liked_ever: set[str] = set()
    followers: dict[str, set[str]] = defaultdict(set)
    for events in log:
        for e in events:
            p = e.payload
            t = e.time_ms
            if e.type == "profile_set":
                profiles[p["user"]] = (p["name"], p.get("avatar"))
            elif e.type == "tweet_posted":
                tweets.setdefault(p["tweet"], (p["user"], p["text"], t))
            elif e.type == "like":
                if p["user"] not in likers[p["tweet"]]:
                    likers[p["tweet"]].add(p["user"])
                    liked_ever.add(p["tweet"])
            elif e.type == "unlike":
                likers[p["tweet"]].discard(p["user"])
            elif e.type == "follow":
                followers[p["followee"]].add(p["user"])
            elif e.type == "unfollow":
                followers[p["followee"]].discard(p["user"])

    views: Views = {}
    for user, (name, avatar) in profiles.items():
        views[("profiles", user)] = {"profile": {"user": user, "name": name, "avatar": avatar}}
    for tweet in liked_ever:
        views[("likes", tweet)] = {"count": {"tweet": tweet, "likes": len(likers[tweet])}}

    def enriched(tweet: str) -> dict[str, Any]:
        author, text, posted_at = tweets[tweet]
        name, avatar = profiles.get(author, (None, None))
        return {
            "tweet": tweet, "author": author, "name": name, "avatar": avatar, "text": text,
            "posted_at": _iso(posted_at), "likes": len(likers[tweet]),
        }  # fmt: skip

    by_author: dict[str, list[tuple[int, str]]] = defaultdict(list)
    for tweet, (author, _, posted_at) in tweets.items():
        views[("tweets", tweet)] = {"tweet": enriched(tweet)}
        by_author[author].append((posted_at, tweet))
    candidates: dict[str, list[tuple[int, str]]] = defaultdict(list)
    for author, posts in by_author.items():
        recent = sorted(posts, reverse=True)[:50]
        for follower in followers[author]:
            candidates[follower].extend(recent)
    for follower, cands in candidates.items():
        top = sorted(cands, reverse=True)[:50]
        if top:
            views[("timeline", follower)] = {tweet: enriched(tweet) for _, tweet in top}
    windows = activity_counts(log, activity_batches(client))
    newest_windows = sorted(windows, reverse=True)[:60]
    if newest_windows:
        views[("activity", "global")] = {
            _iso(s): {
                "window_start": _iso(s), "window_end": _iso(s + 60_000),
                "counts": windows[s], "total": sum(windows[s].values()),
            }
            for s in newest_windows
        }  # fmt: skip
    return views


def activity_batches(client: redis.Redis) -> list[dict[int, tuple[int, int]]]:
    """Where each micro-batch of the ``activity`` pipeline's serving version ended, per log
    partition, in order: the frontier each batch left, from the pipeline's history stream."""
    namespace: bytes | None = client.hget(ACTIVE_KEY, "activity")  # type: ignore[assignment]
    name = "activity" + (namespace or b"").decode()
    entries: list[tuple[bytes, dict[bytes, bytes]]] = client.xrange(history_stream(name))  # type: ignore[assignment]
    return [
        {int(p): entry_id_tuple(i) for p, i in orjson.loads(fields[b"frontier"]).items()}
        for _, fields in entries
    ]


def activity_counts(
    log: list[list[LoggedEvent]], batches: list[dict[int, tuple[int, int]]]
) -> dict[int, dict[str, int]]:
    """Events per window start per type, as Spark's watermark keeps them.

    An event dated more than 10 s after it reached the log (the ms of its entry id) is left out.
    Each batch runs with a watermark: the newest event time of the batches before it, less
    30 s (0 at first). A batch drops an event whose window ended at or before the watermark
    of the batch before it (Spark closes a window for late events one batch after it evicts
    it; a batch with no new events, which Spark runs to evict, counts). Events after the last
    batch are not reflected yet."""
    by_batch: list[list[LoggedEvent]] = [[] for _ in batches]
    for partition, events in enumerate(log):
        ends = [b.get(partition, (0, -1)) for b in batches]  # a frontier only moves on
        for e in events:
            b = bisect_left(ends, entry_id_tuple(e.id))
            if b < len(batches):
                by_batch[b].append(e)
    windows: dict[int, dict[str, int]] = {}
    watermark = before = 0  # this batch's, and the one the batch before it ran with
    for events in by_batch:
        newest = None
        for e in events:
            t = e.time_ms
            if t > e.ingest_ms + 10_000:
                continue
            newest = t if newest is None else max(newest, t)
            start = t - t % 60_000
            if start + 60_000 <= before:
                continue
            counts = windows.setdefault(start, {})
            counts[e.type] = counts.get(e.type, 0) + 1
        before = watermark
        if newest is not None:
            watermark = max(watermark, newest - 30_000)
    return windows


def order_key(entry_id: str) -> tuple[int, int]:
    return entry_id_tuple(entry_id)
