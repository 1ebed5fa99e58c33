"""Chirp's view logic on small static DataFrames: the same pure functions the stream runs."""

from __future__ import annotations

import zlib
from typing import Any

import orjson

from demo.chirp.app import app
from demo.chirp.declared import activity, profiles
from demo.chirp.views import BUCKETS, bucket_of, entities
from liveviews.log.events import partition_for
from liveviews.pipeline.views import EVENT_SCHEMA

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def frame(spark: Any, events: list[tuple[str, dict[str, Any], int]]) -> Any:
    rows = []
    for i, (type_, payload, time_ms) in enumerate(events):
        key = app.event_types[type_].partition_key(payload)
        part = partition_for(key, 4)
        rows.append(
            (part, f"{T0 + i}-0", type_, key, orjson.dumps(payload).decode(), time_ms, T0 + i)
        )
    return spark.createDataFrame(rows, EVENT_SCHEMA)


def changes(df: Any) -> dict[tuple[str, str, str], Any]:
    """(view, key, row) -> new value (None: deleted)."""
    return {
        (r["view"], r["key"], r["row"]): None if r["value"] is None else orjson.loads(r["value"])
        for r in df.collect()
    }


def test_unlike_without_like_changes_nothing(spark):
    out = changes(entities(frame(spark, [("unlike", {"user": "a", "tweet": "b:1"}, T0)])))
    assert out == {}


def test_like_counts_each_user_once_and_unlike_takes_it_back(spark):
    out = changes(
        entities(
            frame(
                spark,
                [
                    ("tweet_posted", {"user": "b", "tweet": "b:1", "text": "hi"}, T0),
                    ("like", {"user": "a", "tweet": "b:1"}, T0 + 1),
                    ("like", {"user": "a", "tweet": "b:1"}, T0 + 2),
                    ("like", {"user": "c", "tweet": "b:1"}, T0 + 3),
                    ("unlike", {"user": "c", "tweet": "b:1"}, T0 + 4),
                ],
            )
        )
    )
    assert out[("likes", "b:1", "count")] == {"tweet": "b:1", "likes": 1}
    assert out[("tweets", "b:1", "tweet")]["likes"] == 1


def test_follow_brings_recent_tweets_and_unfollow_removes_them(spark):
    posts = [
        ("tweet_posted", {"user": "b", "tweet": f"b:{i}", "text": f"t{i}"}, T0 + i)
        for i in range(60)
    ]
    out = changes(
        entities(frame(spark, [*posts, ("follow", {"user": "a", "followee": "b"}, T0 + 99)]))
    )
    timeline = {row: v for (view, key, row), v in out.items() if view == "timeline"}
    assert sorted(timeline) == sorted(f"b:{i}" for i in range(10, 60))  # the newest 50
    assert all(key == "a" for (view, key, _) in out if view == "timeline")

    out = changes(
        entities(
            frame(
                spark,
                [
                    *posts[:3],
                    ("follow", {"user": "a", "followee": "b"}, T0 + 99),
                    ("unfollow", {"user": "a", "followee": "b"}, T0 + 100),
                ],
            )
        )
    )
    assert {row: v for (view, _, row), v in out.items() if view == "timeline"} == {
        "b:0": None,
        "b:1": None,
        "b:2": None,
    }


def test_rename_after_many_tweets_reaches_every_tweet_and_timeline(spark):
    events = [
        ("profile_set", {"user": "b", "name": "Bob"}, T0),
        ("follow", {"user": "a", "followee": "b"}, T0),
    ]
    events += [
        ("tweet_posted", {"user": "b", "tweet": f"b:{i}", "text": f"t{i}"}, T0 + i)
        for i in range(120)
    ]
    events.append(("profile_set", {"user": "b", "name": "Robert", "avatar": "r.png"}, T0 + 500))
    out = changes(entities(frame(spark, events)))
    assert not [k for k in out if k[0] == "profiles"]  # a query writes them (demo.chirp.declared)
    names = {
        row: v["name"] for (view, _, row), v in out.items() if view in ("tweets", "timeline") and v
    }
    tweet_rows = [k for k in out if k[0] == "tweets"]
    assert len(tweet_rows) == 120
    assert set(names.values()) == {"Robert"}
    assert changes(profiles(frame(spark, events), app)) == {
        ("profiles", "b", "profile"): {"user": "b", "name": "Robert", "avatar": "r.png"}
    }
    # Tweets pushed out of the newest 50 are taken off the follower's timeline.
    assert out[("timeline", "a", "b:0")] is None
    assert out[("timeline", "a", "b:119")]["name"] == "Robert"


def test_users_of_one_bucket_each_keep_their_own_entity(spark):
    """The entities pipeline groups users by bucket (one processor call per bucket): users
    that share a bucket, in one batch, each get their own profile, tweets and followers."""
    from pyspark.sql import functions as F

    names = [f"u{i}" for i in range(3 * BUCKETS)]
    buckets = spark.createDataFrame([(n,) for n in names], "user string").select(
        "user", bucket_of(F.col("user")).alias("bucket")
    )
    of = {r["user"]: r["bucket"] for r in buckets.collect()}
    assert all(of[n] == zlib.crc32(n.encode()) % BUCKETS for n in names)  # a fixed function
    a = names[0]
    b, c = [n for n in names[1:] if of[n] == of[a]][:2]
    out = changes(
        entities(
            frame(
                spark,
                [
                    ("tweet_posted", {"user": a, "tweet": f"{a}:1", "text": "from a"}, T0),
                    ("tweet_posted", {"user": b, "tweet": f"{b}:1", "text": "from b"}, T0 + 1),
                    ("profile_set", {"user": a, "name": "Ann"}, T0 + 2),
                    ("follow", {"user": b, "followee": a}, T0 + 3),
                    ("like", {"user": c, "tweet": f"{b}:1"}, T0 + 4),
                ],
            )
        )
    )
    assert out[("tweets", f"{a}:1", "tweet")]["name"] == "Ann"
    assert out[("tweets", f"{b}:1", "tweet")]["name"] is None
    assert out[("tweets", f"{b}:1", "tweet")]["likes"] == 1
    assert out[("timeline", b, f"{a}:1")]["text"] == "from a"
    assert {key for view, key, _ in out if view == "timeline"} == {b}


def test_repeated_tweet_id_keeps_the_first_post(spark):
    out = changes(
        entities(
            frame(
                spark,
                [
                    ("tweet_posted", {"user": "b", "tweet": "b:1", "text": "first"}, T0),
                    ("tweet_posted", {"user": "b", "tweet": "b:1", "text": "second"}, T0 + 1),
                ],
            )
        )
    )
    assert out[("tweets", "b:1", "tweet")]["text"] == "first"


def test_profile_is_the_latest_by_offset_and_an_avatar_can_be_taken_away(spark):
    events = [
        ("profile_set", {"user": "u", "name": "U", "avatar": "u.png"}, T0 + 9),
        ("profile_set", {"user": "u", "name": "U2"}, T0),  # later in the log, earlier in time
        ("profile_set", {"user": "v", "name": "V", "avatar": "v.png"}, T0),
    ]
    assert changes(profiles(frame(spark, events), app)) == {
        ("profiles", "u", "profile"): {"user": "u", "name": "U2", "avatar": None},
        ("profiles", "v", "profile"): {"user": "v", "name": "V", "avatar": "v.png"},
    }


def test_activity_counts_each_type_per_minute_of_event_time(spark):
    """Every event of a static frame counted in its minute (Spark's watermark, which drops an
    event whose minute closed before its micro-batch, acts between micro-batches only:
    tests/demo/test_chirp_declared.py); one dated after its arrival is left out."""
    events = [
        ("profile_set", {"user": "u", "name": "U"}, T0 - 90_000),
        ("like", {"user": "u", "tweet": "v:1"}, T0 - 61_000),
        ("like", {"user": "w", "tweet": "v:1"}, T0 - 60_000),
        ("tweet_posted", {"user": "v", "tweet": "v:2", "text": "hi"}, T0 + 60_000),  # ahead
    ]
    out = changes(activity(frame(spark, events), app))
    assert out == {
        ("activity", "global", "2025-12-31T23:58:00.000Z"): {
            "window_start": "2025-12-31T23:58:00.000Z", "window_end": "2025-12-31T23:59:00.000Z",
            "counts": {"like": 1, "profile_set": 1}, "total": 2,
        },
        ("activity", "global", "2025-12-31T23:59:00.000Z"): {
            "window_start": "2025-12-31T23:59:00.000Z", "window_end": "2026-01-01T00:00:00.000Z",
            "counts": {"like": 1}, "total": 1,
        },
    }  # fmt: skip
    scores = {r["row"]: r["score"] for r in activity(frame(spark, events), app).collect()}
    assert scores["2025-12-31T23:58:00.000Z"] == T0 - 120_000
