"""Chirp's views recomputed offline from the whole log, in plain Python.

Independent of the Spark code on purpose: it shares only the log format (``streaming.core.events``)
and the written definition of each view, so a bug in the pipeline cannot hide in both.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection
from datetime import UTC, datetime
from typing import Any

import redis

from streaming.core.events import MAX_EVENT_TIME_MS, decode_entry, entry_id_tuple, log_stream

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


def recompute(client: redis.Redis, partitions: int, skip: Collection[str] = ()) -> Views:
    """The views from the log; ``skip``: offsets of bad entries the test wrote, which the
    views must leave out."""
    log = read_log(client, partitions, skip)
    profiles: dict[str, tuple[str, Any]] = {}
    tweets: dict[str, tuple[str, str, int]] = {}  # tweet -> (author, text, posted_at)
    likers: dict[str, set[str]] = defaultdict(set)
    liked_ever: set[str] = set()
    followers: dict[str, set[str]] = defaultdict(set)
    windows: dict[int, dict[str, dict[str, int]]] = {}
    for events in log:
        newest = -1
        for e in events:
            p = e.payload
            t = e.time_ms
            start = t - t % 60_000
            # A window that would end after year 9999 cannot be rendered: the activity view
            # sets such an event aside as a dead letter, as if it were not in the log.
            if start + 60_000 <= MAX_EVENT_TIME_MS:
                late = newest >= 0 and t < newest - 30_000
                w = windows.setdefault(start, {"counts": {}, "late": {}})
                bucket = w["late" if late else "counts"]
                bucket[e.type] = bucket.get(e.type, 0) + 1
                newest = max(newest, t)
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
    newest_windows = sorted(windows, reverse=True)[:60]
    if newest_windows:
        views[("activity", "global")] = {
            _iso(s): {
                "window_start": _iso(s), "window_end": _iso(s + 60_000),
                "counts": windows[s]["counts"], "late": windows[s]["late"],
                "total": sum(windows[s]["counts"].values()),
                "late_total": sum(windows[s]["late"].values()),
            }
            for s in newest_windows
        }  # fmt: skip
    return views


def order_key(entry_id: str) -> tuple[int, int]:
    return entry_id_tuple(entry_id)
