"""End to end with the real Spark job: publish through the gateway, follow the views live.

A writer learns when its write is visible from the progress frames: once the frontier reaches
the offset it was answered, the views (and so its subscription) reflect that write.
"""

from __future__ import annotations

from typing import Any

import aiohttp
import redis

from tests.support.gateway import ServedGateway, State, open_sse, stored_rows


def covered(frontier: dict[str, str], offset: dict[str, Any]) -> bool:
    have = frontier.get(str(offset["partition"]))
    return have is not None and tuple(map(int, have.split("-"))) >= tuple(
        map(int, offset["id"].split("-"))
    )


async def test_published_events_reach_subscribers_through_the_pipeline(
    gateway: ServedGateway, store: redis.Redis, pipeline: Any
) -> None:
    async with aiohttp.ClientSession() as s:
        tweets = State()
        sse = await open_sse(s, gateway.url + "/v1/views/tweets/alice:1/live",
                             gateway.headers("alice"))  # fmt: skip
        tweets.apply(await sse.next())
        timeline = State()
        bob_sse = await open_sse(s, gateway.url + "/v1/views/timeline/bob/live",
                                 gateway.headers("bob"))  # fmt: skip
        timeline.apply(await bob_sse.next())

        async def publish(user: str, events: list[dict[str, Any]]) -> dict[str, Any]:
            resp = await s.post(gateway.url + "/v1/events", json=events,
                                headers=gateway.headers(user))  # fmt: skip
            assert resp.status == 202, await resp.text()
            return dict((await resp.json())["offsets"][-1])

        await publish("bob", [{"type": "follow",
                               "payload": {"user": "bob", "followee": "alice"}}])  # fmt: skip
        await publish("alice", [
            {"type": "profile_set", "payload": {"user": "alice", "name": "Alice"}},
            {"type": "tweet_posted",
             "payload": {"user": "alice", "tweet": "alice:1", "text": "hello"}},
        ])  # fmt: skip
        like = {"type": "like", "payload": {"user": "bob", "tweet": "alice:1"}}
        last = await publish("bob", [like])
        while True:  # until a progress frame says the like is in the views
            ev = await sse.next(timeout=60)
            tweets.apply(ev)
            if ev.event == "progress" and covered(ev.data["frontier"], last):
                break
        assert tweets.rows == stored_rows(store, "tweets", "alice:1", 8)
        assert tweets.rows["tweet"]["likes"] == 1
        assert tweets.rows["tweet"]["name"] == "Alice"
        pipeline.wait_until_caught_up(store)
        while timeline.rows != stored_rows(store, "timeline", "bob", 8):
            timeline.apply(await bob_sse.next(timeout=30))
        assert set(timeline.rows) == {"alice:1"}
        await sse.close()
        await bob_sse.close()
