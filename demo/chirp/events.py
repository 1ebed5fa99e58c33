"""Chirp's event types: the facts its users can add to the log.

A tweet id is ``<author>:<suffix>`` (as a status URL names its author), so a like can be routed
to the tweet author's partition without trusting the client to say who the author is. Every
event about a user's profile, tweets, likes of their tweets and their followers is keyed by
that user, so one entity's events are totally ordered in one log partition.
"""

from __future__ import annotations

from typing import Any

from liveviews import App, Schema, String

USER = String(max_length=32, pattern=r"[a-z0-9_]{1,32}")
TWEET = String(max_length=80, pattern=r"[a-z0-9_]{1,32}:[A-Za-z0-9_-]{1,46}")


def author_of(tweet: str) -> str:
    return tweet.partition(":")[0]


def _own_tweet(p: dict[str, Any]) -> str | None:
    if author_of(p["tweet"]) != p["user"]:
        return f"tweet id {p['tweet']!r} must start with its author's name: '{p['user']}:...'."
    return None


def _not_self(p: dict[str, Any]) -> str | None:
    return "a user cannot follow themselves." if p["user"] == p["followee"] else None


def declare(app: App) -> None:
    def by_user(p: dict[str, Any]) -> str:
        return str(p["user"])

    def by_followee(p: dict[str, Any]) -> str:
        return str(p["followee"])

    def by_tweet_author(p: dict[str, Any]) -> str:
        return author_of(p["tweet"])

    app.event_type(
        "profile_set",
        Schema(
            {
                "user": USER,
                "name": String(max_length=64),
                "avatar": String(max_length=256, optional=True),
            }
        ),  # fmt: skip
        by_user,
        author=by_user,
        description="A user sets their display name and avatar.",
    )
    app.event_type(
        "tweet_posted",
        Schema({"user": USER, "tweet": TWEET, "text": String(max_length=280)}, check=_own_tweet),
        by_user,
        author=by_user,
        description="A user posts a tweet.",
    )
    follow = Schema({"user": USER, "followee": USER}, check=_not_self)
    app.event_type("follow", follow, by_followee, author=by_user,
                   description="A user starts following another.")  # fmt: skip
    app.event_type("unfollow", follow, by_followee, author=by_user,
                   description="A user stops following another.")  # fmt: skip
    like = Schema({"user": USER, "tweet": TWEET})
    app.event_type("like", like, by_tweet_author, author=by_user,
                   description="A user likes a tweet.")  # fmt: skip
    app.event_type("unlike", like, by_tweet_author, author=by_user,
                   description="A user takes back a like.")  # fmt: skip
