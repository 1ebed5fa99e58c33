"""Chirp activity, made up: seed data for the demo and load for tests and benchmarks.

Deterministic for a given seed. It produces what real users do, including what views must
absorb gracefully: likes taken back that were never given, follows repeated, renames after
many tweets, and events that arrive with an event time well in the past.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

SEED_USERS = {
    "alice": "Alice Liddell",
    "bob": "Bob Dylan",
    "carol": "Carol Shaw",
    "dave": "Dave Brubeck",
    "erin": "Erin Brockovich",
}
SEED_FOLLOWS = [("alice", "bob"), ("alice", "carol"), ("bob", "alice"), ("carol", "alice"),
                ("dave", "alice"), ("dave", "bob"), ("erin", "carol")]  # fmt: skip
SEED_TWEETS = [
    ("bob", "The log is the database; everything else is a cache."),
    ("carol", "Shipped a live view today. No polling, no reload."),
    ("alice", "Down the rabbit hole of stream processing."),
    ("dave", "Take five: the views caught up before I finished typing."),
]


def seed_events(now_ms: int) -> list[dict[str, Any]]:
    """A few users, follows and tweets, so the demo looks alive on first start."""
    out: list[dict[str, Any]] = []
    for user, name in SEED_USERS.items():
        out.append(_ev("profile_set", {"user": user, "name": name}, now_ms))
    for user, followee in SEED_FOLLOWS:
        out.append(_ev("follow", {"user": user, "followee": followee}, now_ms))
    for i, (user, text) in enumerate(SEED_TWEETS):
        tweet = f"{user}:seed{i}"
        out.append(_ev("tweet_posted", {"user": user, "tweet": tweet, "text": text}, now_ms + i))
    out.append(_ev("like", {"user": "alice", "tweet": "bob:seed0"}, now_ms + 10))
    out.append(_ev("like", {"user": "carol", "tweet": "bob:seed0"}, now_ms + 11))
    return out


def _ev(type_: str, payload: dict[str, Any], time_ms: int) -> dict[str, Any]:
    return {"type": type_, "payload": payload, "time": time_ms}


class Activity:
    """An endless, reproducible stream of plausible Chirp events."""

    def __init__(
        self, users: int | list[str] = 20, seed: int = 7, start_ms: int = 1_767_225_600_000
    ) -> None:
        self.rng = random.Random(seed)
        self.users = [f"u{i}" for i in range(users)] if isinstance(users, int) else list(users)
        self.clock = start_ms
        self.tweets: list[str] = []
        self.serial = 0
        self.prefix = "t"

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return self

    def __next__(self) -> dict[str, Any]:
        rng = self.rng
        self.clock += rng.randint(0, 400)
        time_ms = self.clock
        if rng.random() < 0.03:
            time_ms -= rng.randint(31_000, 120_000)  # arrives late
        user = rng.choice(self.users)
        roll = rng.random()
        if roll < 0.10 or not self.tweets:
            self.serial += 1
            tweet = f"{user}:{self.prefix}{self.serial}"
            self.tweets.append(tweet)
            text = f"post {self.serial}"
            return _ev("tweet_posted", {"user": user, "tweet": tweet, "text": text}, time_ms)
        if roll < 0.60:
            return _ev("like", {"user": user, "tweet": rng.choice(self.tweets[-200:])}, time_ms)
        if roll < 0.75:
            return _ev("unlike", {"user": user, "tweet": rng.choice(self.tweets[-200:])}, time_ms)
        if roll < 0.95:
            return _ev("follow", {"user": user, "followee": self._other(user)}, time_ms)
        if roll < 0.98:
            return _ev("unfollow", {"user": user, "followee": self._other(user)}, time_ms)
        return _ev("profile_set", {"user": user, "name": f"{user} #{rng.randint(1, 99)}"}, time_ms)

    def _other(self, user: str) -> str:
        while True:
            other = self.rng.choice(self.users)
            if other != user:
                return other

    def take(self, n: int) -> list[dict[str, Any]]:
        return [next(self) for _ in range(n)]
