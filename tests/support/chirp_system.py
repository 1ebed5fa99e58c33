"""The whole Chirp system in one process, for the browser tests: store, Spark, gateway, data.

The store is the test run's; the Spark pipeline is the real streaming query
(``RunningPipeline``), with a fresh checkpoint; the gateway is a real uvicorn serving the API,
demo/web and client-js. ``seed()`` writes Chirp's seed users and posts, two users of the
tests' own, and some activity over the last minutes (a few of it back-dated), through the real
log.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import redis

from demo.chirp import app as chirp
from demo.chirp.generate import SEED_TWEETS, seed_events
from liveviews.app import App
from liveviews.log.eventlog import EventLog
from liveviews.pipeline.settings import Settings
from tests.support.gateway import ServedGateway
from tests.support.gateway_settings import PARTITIONS, SHARDS, settings_for
from tests.support.pipeline import RunningPipeline

# The tests' two users: A reads, B writes.
USERS = {"ada": "Ada Lovelace", "ben": "Ben Franklin"}


def event(type_: str, time_ms: int, **payload: Any) -> dict[str, Any]:
    return {"type": type_, "payload": payload, "time": time_ms}


def background(now_ms: int) -> list[dict[str, Any]]:
    """Ten minutes of plausible activity among the seed users, ending now, and some
    back-dated."""
    people = ["alice", "bob", "carol", "dave", "erin"]
    seed_tweets = [f"{u}:seed{i}" for i, (u, _) in enumerate(SEED_TWEETS)]
    texts = [
        "Views that update themselves feel like magic.",
        "Read once, then just listen.",
        "The change topic never forgets a delta.",
        "Reconnected and nothing was missing.",
    ]
    out = []
    start = now_ms - 10 * 60_000
    for i in range(60):
        t = start + i * 10_000
        user = people[i % 5]
        if i % 9 == 4:
            out.append(
                event("tweet_posted", t, user=user, tweet=f"{user}:bg{i}", text=texts[i % 4])
            )
        elif i % 4 == 1:
            out.append(event("follow", t, user=user, followee=people[(i + 2) % 5]))
        else:
            out.append(event("like", t, user=user, tweet=seed_tweets[(i + 1) % 4]))
    # Arriving now with an event time four minutes ago, after newer events of their partition:
    # their minute is still open for Spark's watermark, which earlier micro-batches moved.
    for i, user in enumerate(["carol", "dave", "erin"]):
        out.append(event("like", now_ms - 4 * 60_000 + i, user=user, tweet="bob:seed0"))
    return out


class System:
    """An application's pipelines and a gateway serving it over ``store_url``; ``stop()`` ends
    both."""

    def __init__(self, store_url: str, spark: Any, data_dir: Path, app: App | None = None,
                 **gateway_env: str) -> None:  # fmt: skip
        self.client = redis.Redis.from_url(store_url)
        self.client.flushdb()
        self.settings = Settings.from_env({
            "REDIS_URL": store_url,
            "LV_DATA_DIR": str(data_dir / "data"),
            "LV_CHECKPOINT_DIR": str(data_dir / "checkpoints"),
            "LV_LOG_PARTITIONS": str(PARTITIONS),
            "LV_CHANGE_SHARDS": str(SHARDS),
            "LV_SHUFFLE_PARTITIONS": "2",
            "LV_REALTIME": os.environ["LV_REALTIME"],  # micro-batches: tests/conftest.py
        })  # fmt: skip
        self.pipeline = RunningPipeline(spark, self.settings, app)
        env = {"LV_MAX_SUBSCRIPTIONS_PER_SOCKET": "200", "LV_HEARTBEAT_SECONDS": "5", **gateway_env}
        self.gateway = ServedGateway(settings_for(store_url, **env)).start()
        self.url = self.gateway.url

    def stop(self) -> None:
        self.gateway.stop()
        self.pipeline.stop()
        self.client.close()


class ChirpSystem(System):
    """Chirp's pipelines and a gateway, with Chirp's seed."""

    def seed(self) -> None:
        now = int(time.time() * 1000)
        log = EventLog(self.client, chirp, PARTITIONS)
        # In event time order, but for the deliberately back-dated likes.
        log.append_batch(seed_events(now - 11 * 60_000))
        log.append_batch(background(now))
        log.append_batch([event("profile_set", now, user=u, name=n) for u, n in USERS.items()])
        log.append_batch([event("follow", now, user="ada", followee=f) for f in ("bob", "carol")])
        self.pipeline.wait_until_caught_up(self.client, timeout=120)
