"""Chirp's views that need a state processor: pure functions from the event DataFrame to row
changes.

``entities`` groups events by the entity they are about (a user, in buckets of users) and
keeps, in Spark's state store, what each user's views need: profile, tweets, like counts and
followers. From one user's events it derives the rows of ``likes/{tweet}``, ``tweets/{tweet}``
and, by fan-out to each follower, ``timeline/{follower}``. Plain streaming joins cannot retract
rows, and a rename must change rows written long ago; a stateful processor keyed by the entity
can, and it applies each user's events in log order. A like counts each user once, which needs
each user's last vote on the tweet: two stacked aggregations, which Spark refuses in update
mode, so ``likes`` is written here too.

The views a query can say (``profiles``, ``activity``) are declared in ``demo.chirp.declared``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import orjson
from pyspark.sql import Column, DataFrame, GroupedData, Row
from pyspark.sql import functions as F
from pyspark.sql.streaming.stateful_processor import (
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)
from pyspark.sql.types import BinaryType, StringType, StructField, StructType

from liveviews import CHANGE_SCHEMA, Changes, isolated, log_order
from liveviews.log.events import iso

TIMELINE_SIZE = 50
BUCKETS = 256
"""Grouping keys of the entities pipeline: a user's state lives in bucket crc32(user) % BUCKETS.
A pipeline's checkpoint keeps the count it was created with."""

# The processors' state schemas as types, not DDL strings: a processor declares its state in
# every task, and Spark parses each DDL string with a round trip to the JVM.
ENTITY_STATE = StructType([StructField("state", BinaryType())])
USER = StructType([StructField("user", StringType())])


def profile_value(user: str, profile: list[Any] | None) -> dict[str, Any]:
    name, avatar = profile if profile else (None, None)
    return {"user": user, "name": name, "avatar": avatar}


def tweet_value(
    tweet: str, author: str, text: str, posted_at: int, likes: int, profile: list[Any] | None,
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
    """The users of one bucket: each user's profile, tweets, likes of those tweets, and
    followers. Runs on executors.

    Spark calls the processor once per grouping key and micro-batch, and each call costs round
    trips to the JVM (set the key, then each state access) and an Arrow batch of its own. Keyed
    by user, a backlog batch paid that for each of ~16k users; keyed by ``bucket`` (the user's
    CRC-32, modulo ``BUCKETS``), a call serves every user of the bucket the batch touches,
    and each user costs two state accesses: read its entity, write it back when it changed.
    Each entity is one orjson value in the bucket's map state, keyed by user.
    """

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.entities = handle.getMapState("entities", USER, ENTITY_STATE)

    def handleInputRows(
        self, key: Any, rows: Iterator[Row], timerValues: TimerValues
    ) -> Iterator[Row]:
        by_user: dict[str, list[tuple[tuple[int, int], str, str, int]]] = defaultdict(list)
        for _, _, user, offset, type_, payload, time_ms in rows:  # the columns of ``entities``
            by_user[user].append((log_order(offset), type_, payload, time_ms))
        changes = Changes()
        for user, events in by_user.items():
            stored = self.entities.getValue((user,))
            entity = Entity(user, orjson.loads(stored[0]) if stored else None, changes)
            for _, type_, payload, time_ms in sorted(events):
                entity.apply(type_, orjson.loads(payload), int(time_ms))
            if entity.dirty:
                self.entities.updateValue((user,), (orjson.dumps(entity.state),))
        yield from changes.rows()

    def close(self) -> None:
        pass


class Entity:
    """A user's state and the row changes its events cause: pure Python, no Spark.

    ``state`` holds: ``profile`` [name, avatar] or null; ``tweets`` {id: [text, posted_at,
    likes]}; ``likers`` {tweet id: [user, ...]}; ``followers`` [user, ...]; ``recent`` the
    newest tweets as [[posted_at, id], ...], those that can appear on timelines.
    """

    def __init__(
        self, user: str, state: dict[str, Any] | None, changes: Changes | None = None
    ) -> None:
        self.user = user
        self.state = state or {
            "profile": None, "tweets": {}, "likers": {}, "followers": [], "recent": []
        }  # fmt: skip
        self.changes = Changes() if changes is None else changes
        self.dirty = False

    def apply(self, type_: str, p: dict[str, Any], time_ms: int) -> None:
        handler = getattr(self, f"on_{type_}", None)
        if handler is not None:
            handler(p, time_ms)

    def tweet_value(self, tweet: str) -> tuple[dict[str, Any], int] | None:
        stored = self.state["tweets"].get(tweet)
        if stored is None:
            return None
        text, posted_at, likes = stored
        return tweet_value(
            tweet, self.user, text, posted_at, likes, self.state["profile"]
        ), posted_at

    def in_recent(self, tweet: str) -> bool:
        return any(t == tweet for _, t in self.state["recent"])

    def emit_tweet(self, tweet: str) -> None:
        found = self.tweet_value(tweet)
        if found is None:
            return
        value, posted_at = found
        self.changes.upsert("tweets", tweet, "tweet", value)
        if self.in_recent(tweet):
            for follower in self.state["followers"]:
                self.changes.upsert("timeline", follower, tweet, value, posted_at)

    def on_profile_set(self, p: dict[str, Any], time_ms: int) -> None:
        self.state["profile"] = [p["name"], p.get("avatar")]
        self.dirty = True
        for tweet in self.state["tweets"]:
            self.emit_tweet(tweet)

    def on_tweet_posted(self, p: dict[str, Any], time_ms: int) -> None:
        tweet, tweets = p["tweet"], self.state["tweets"]
        if tweet in tweets:
            return  # a tweet id is written once; a repeated post changes nothing
        likes = len(self.state["likers"].get(tweet, ()))
        tweets[tweet] = [p["text"], time_ms, likes]
        before = [tuple(x) for x in self.state["recent"]]
        after = newest([*before, (time_ms, tweet)])
        self.state["recent"] = [list(x) for x in after]
        self.dirty = True
        for _, gone in set(before) - set(after):
            for follower in self.state["followers"]:
                self.changes.delete("timeline", follower, gone)
        self.emit_tweet(tweet)

    def _set_like(self, p: dict[str, Any], liked: bool) -> None:
        tweet, liker = p["tweet"], p["user"]
        likers = self.state["likers"].setdefault(tweet, [])
        if (liker in likers) == liked:
            return  # liking twice, or taking back a like never given, changes nothing
        if liked:
            likers.append(liker)
        else:
            likers.remove(liker)
        self.dirty = True
        count = len(likers)
        if tweet in self.state["tweets"]:
            self.state["tweets"][tweet][2] = count
        self.changes.upsert("likes", tweet, "count", {"tweet": tweet, "likes": count})
        self.emit_tweet(tweet)

    def on_like(self, p: dict[str, Any], time_ms: int) -> None:
        self._set_like(p, True)

    def on_unlike(self, p: dict[str, Any], time_ms: int) -> None:
        self._set_like(p, False)

    def on_follow(self, p: dict[str, Any], time_ms: int) -> None:
        follower, followers = p["user"], self.state["followers"]
        if follower in followers:
            return
        followers.append(follower)
        self.dirty = True
        for _, tweet in self.state["recent"]:
            found = self.tweet_value(tweet)
            if found is not None:
                self.changes.upsert("timeline", follower, tweet, found[0], found[1])

    def on_unfollow(self, p: dict[str, Any], time_ms: int) -> None:
        follower, followers = p["user"], self.state["followers"]
        if follower not in followers:
            return
        followers.remove(follower)
        self.dirty = True
        for _, tweet in self.state["recent"]:
            self.changes.delete("timeline", follower, tweet)


def bucket_of(user: Column) -> Column:
    """A user's bucket. CRC-32 is a fixed function, so a user's bucket, and so where its state
    is, does not change from one Spark version to the next."""
    return F.crc32(user.cast("binary")) % BUCKETS


def entity_input(events: DataFrame) -> GroupedData:
    """What ``EntityProcessor`` reads: only the columns it needs cross to Python, grouped by
    the user's bucket."""
    bucketed = events.select(
        bucket_of(F.col("key")).alias("bucket"), "partition", "key", "offset", "type", "payload",
        "event_time_ms",
    )  # fmt: skip
    return bucketed.groupBy("bucket")


def entities(events: DataFrame) -> DataFrame:
    return entity_input(events).transformWithState(
        isolated(EntityProcessor()), CHANGE_SCHEMA, "Update", "None"
    )
