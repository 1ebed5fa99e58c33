"""Chirp's views, as Spark pipelines: pure functions from the event DataFrame to row changes.

``entities`` groups events by the entity they are about (a user) and keeps, in Spark's state
store, what that user's views need: profile, tweets, like counts and followers. From one
user's events it derives the rows of ``profiles/{user}``, ``likes/{tweet}``, ``tweets/{tweet}``
and, by fan-out to each follower, ``timeline/{follower}``. Plain streaming joins cannot retract
rows, and a rename must change rows written long ago; a stateful processor keyed by the
entity can, and each call sees that entity's events in log order.

``activity`` counts events per type in 1-minute tumbling windows of event time. Each log
partition carries its own watermark (its newest event time so far, less ``LATENESS``); an
event older than its partition's watermark is counted in its window's ``late`` figure instead
of silently dropped. Because a partition is ordered, which events are late does not depend on
how the log was cut into micro-batches, so a replay or an offline recomputation agrees.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson
from pyspark.sql import DataFrame, Row
from pyspark.sql import functions as F
from pyspark.sql.streaming.stateful_processor import (
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)

from streaming.events import iso
from streaming.views import CHANGE_SCHEMA, Changes, log_order

TIMELINE_SIZE = 50
WINDOW_MS = 60_000
LATENESS_MS = 30_000


def profile_value(user: str, profile: tuple[str, str | None] | None) -> dict[str, Any]:
    name, avatar = profile if profile else (None, None)
    return {"user": user, "name": name, "avatar": avatar}


def tweet_value(
    tweet: str, author: str, text: str, posted_at: int, likes: int,
    profile: tuple[str, str | None] | None,
) -> dict[str, Any]:  # fmt: skip
    name, avatar = profile if profile else (None, None)
    return {
        "tweet": tweet,
        "author": author,
        "name": name,
        "avatar": avatar,
        "text": text,
        "posted_at": iso(posted_at),
        "likes": likes,
    }


def newest(recent: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """A user's tweets that can appear on timelines: the newest, ties broken by tweet id."""
    return sorted(recent, reverse=True)[:TIMELINE_SIZE]


class EntityProcessor(StatefulProcessor):
    """One user's profile, tweets, likes of those tweets, and followers. Runs on executors."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.profile = handle.getValueState("profile", "name STRING, avatar STRING")
        self.tweets = handle.getMapState("tweets", "tweet STRING", "text STRING, posted_at LONG")
        self.counts = handle.getMapState("counts", "tweet STRING", "likes LONG")
        self.likers = handle.getMapState("likers", "tweet STRING, user STRING", "liked BOOLEAN")
        self.followers = handle.getMapState("followers", "user STRING", "since LONG")
        self.recent = handle.getValueState("recent", "tweets STRING")

    def handleInputRows(
        self, key: Any, rows: Iterator[Row], timerValues: TimerValues
    ) -> Iterator[Row]:
        user = key[0]
        group = _EntityGroup(self, user)
        for e in sorted(rows, key=lambda r: log_order(r["offset"])):
            group.apply(e["type"], orjson.loads(e["payload"]), e["event_time_ms"])
        group.save()
        yield from group.changes.rows()

    def close(self) -> None:
        pass


class _EntityGroup:
    """The state of one user while one micro-batch's events for them are applied."""

    def __init__(self, proc: EntityProcessor, user: str) -> None:
        self.p = proc
        self.user = user
        self.changes = Changes()
        self.profile: tuple[str, str | None] | None = proc.profile.get()
        raw = proc.recent.get()
        self.recent: list[tuple[int, str]] = [tuple(x) for x in orjson.loads(raw[0])] if raw else []
        self.recent_dirty = False
        self._followers: list[str] | None = None

    def followers(self) -> list[str]:
        if self._followers is None:
            self._followers = sorted(k[0] for k in self.p.followers.keys())
        return self._followers

    def likes(self, tweet: str) -> int:
        v = self.p.counts.getValue((tweet,))
        return int(v[0]) if v else 0

    def emit_tweet(self, tweet: str) -> None:
        stored = self.p.tweets.getValue((tweet,))
        if stored is None:
            return
        text, posted_at = stored
        value = tweet_value(tweet, self.user, text, posted_at, self.likes(tweet), self.profile)
        self.changes.upsert("tweets", tweet, "tweet", value)
        if (posted_at, tweet) in self.recent:
            for follower in self.followers():
                self.changes.upsert("timeline", follower, tweet, value, posted_at)

    def apply(self, type_: str, p: dict[str, Any], time_ms: int) -> None:
        handler = getattr(self, f"on_{type_}", None)
        if handler is not None:
            handler(p, time_ms)

    def on_profile_set(self, p: dict[str, Any], time_ms: int) -> None:
        self.profile = (p["name"], p.get("avatar"))
        self.p.profile.update(self.profile)
        self.changes.upsert("profiles", self.user, "profile", profile_value(self.user, self.profile))
        for (tweet,) in self.p.tweets.keys():
            self.emit_tweet(tweet)

    def on_tweet_posted(self, p: dict[str, Any], time_ms: int) -> None:
        tweet = p["tweet"]
        if self.p.tweets.containsKey((tweet,)):
            return  # a tweet id is written once; a repeated post changes nothing
        self.p.tweets.updateValue((tweet,), (p["text"], time_ms))
        before = self.recent
        self.recent = newest([*before, (time_ms, tweet)])
        self.recent_dirty = True
        for _, gone in set(before) - set(self.recent):
            for follower in self.followers():
                self.changes.delete("timeline", follower, gone)
        self.emit_tweet(tweet)

    def _set_like(self, p: dict[str, Any], liked: bool) -> None:
        tweet, liker = p["tweet"], p["user"]
        if self.p.likers.containsKey((tweet, liker)) == liked:
            return  # liking twice, or taking back a like never given, changes nothing
        if liked:
            self.p.likers.updateValue((tweet, liker), (True,))
        else:
            self.p.likers.removeKey((tweet, liker))
        count = self.likes(tweet) + (1 if liked else -1)
        self.p.counts.updateValue((tweet,), (count,))
        self.changes.upsert("likes", tweet, "count", {"tweet": tweet, "likes": count})
        self.emit_tweet(tweet)

    def on_like(self, p: dict[str, Any], time_ms: int) -> None:
        self._set_like(p, True)

    def on_unlike(self, p: dict[str, Any], time_ms: int) -> None:
        self._set_like(p, False)

    def _timeline_rows(self, follower: str) -> Iterator[tuple[str, dict[str, Any], int]]:
        for posted_at, tweet in self.recent:
            stored = self.p.tweets.getValue((tweet,))
            if stored is not None:
                value = tweet_value(
                    tweet, self.user, stored[0], posted_at, self.likes(tweet), self.profile
                )
                yield tweet, value, posted_at

    def on_follow(self, p: dict[str, Any], time_ms: int) -> None:
        follower = p["user"]
        if self.p.followers.containsKey((follower,)):
            return
        self.p.followers.updateValue((follower,), (time_ms,))
        self._followers = None
        for tweet, value, posted_at in self._timeline_rows(follower):
            self.changes.upsert("timeline", follower, tweet, value, posted_at)

    def on_unfollow(self, p: dict[str, Any], time_ms: int) -> None:
        follower = p["user"]
        if not self.p.followers.containsKey((follower,)):
            return
        self.p.followers.removeKey((follower,))
        self._followers = None
        for _, tweet in self.recent:
            self.changes.delete("timeline", follower, tweet)

    def save(self) -> None:
        if self.recent_dirty:
            self.p.recent.update((orjson.dumps(self.recent).decode(),))


class ActivityProcessor(StatefulProcessor):
    """Events per type per minute of event time, with late arrivals counted apart."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.newest = handle.getMapState("newest", "partition INT", "event_time_ms LONG")
        self.windows = handle.getMapState("windows", "start LONG", "counts STRING")

    def handleInputRows(
        self, key: Any, rows: Iterator[Row], timerValues: TimerValues
    ) -> Iterator[Row]:
        newest: dict[int, int] = {}
        windows: dict[int, dict[str, dict[str, int]]] = {}
        ordered = sorted(rows, key=lambda r: (r["partition"], log_order(r["offset"])))
        for e in ordered:
            part, t = e["partition"], e["event_time_ms"]
            if part not in newest:
                stored = self.newest.getValue((part,))
                newest[part] = stored[0] if stored else -1
            start = t - t % WINDOW_MS
            if start not in windows:
                stored = self.windows.getValue((start,))
                windows[start] = orjson.loads(stored[0]) if stored else {"counts": {}, "late": {}}
            late = newest[part] >= 0 and t < newest[part] - LATENESS_MS
            bucket = windows[start]["late" if late else "counts"]
            bucket[e["type"]] = bucket.get(e["type"], 0) + 1
            newest[part] = max(newest[part], t)
        changes = Changes()
        for part, t in newest.items():
            self.newest.updateValue((part,), (t,))
        for start, w in windows.items():
            self.windows.updateValue((start,), (orjson.dumps(w).decode(),))
            changes.upsert("activity", "global", iso(start), window_value(start, w), start)
        yield from changes.rows()

    def close(self) -> None:
        pass


def window_value(start: int, w: dict[str, dict[str, int]]) -> dict[str, Any]:
    return {
        "window_start": iso(start),
        "window_end": iso(start + WINDOW_MS),
        "counts": w["counts"],
        "late": w["late"],
        "total": sum(w["counts"].values()),
        "late_total": sum(w["late"].values()),
    }


def entities(events: DataFrame) -> DataFrame:
    return events.groupBy("key").transformWithState(
        EntityProcessor(), CHANGE_SCHEMA, "Update", "None"
    )


def activity(events: DataFrame) -> DataFrame:
    return (
        events.withColumn("scope", F.lit("global"))
        .groupBy("scope")
        .transformWithState(ActivityProcessor(), CHANGE_SCHEMA, "Update", "None")
    )
