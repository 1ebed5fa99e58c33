"""``GET /v1/log/live``: events as they are appended, after the recent ones; reading needs a token."""

from __future__ import annotations

from typing import Any

import aiohttp
import redis

from tests.support.gateway import ServedGateway, open_sse

LOG = "/v1/log/live"


def tweet(user: str, n: int) -> dict[str, Any]:
    return {"type": "tweet_posted", "payload": {"user": user, "tweet": f"{user}:{n}", "text": f"t{n}"},
            "time": "2026-01-31T12:00:00Z"}  # fmt: skip


async def test_appended_events_stream_in_order_and_new_readers_get_the_recent_ones(
    gateway: ServedGateway, store: redis.Redis
) -> None:
    async with aiohttp.ClientSession(headers=gateway.headers("alice")) as s:
        sse = await open_sse(s, gateway.url + LOG, params={"recent": "0"})
        resp = await s.post(gateway.url + "/v1/events",
                            json=[tweet("alice", i) for i in range(3)])  # fmt: skip
        assert resp.status == 202
        offsets = (await resp.json())["offsets"]
        seen = [await sse.next(skip=("heartbeat",)) for _ in range(3)]
        assert [f.event for f in seen] == ["log"] * 3 and all(f.id is None for f in seen)
        assert [f.data["id"] for f in seen] == [o["id"] for o in offsets]
        first = seen[0].data
        assert first == {
            "partition": offsets[0]["partition"], "id": offsets[0]["id"],
            "type": "tweet_posted", "key": "alice", "time": "2026-01-31T12:00:00.000Z",
            "payload": {"user": "alice", "tweet": "alice:0", "text": "t0"},
        }  # fmt: skip
        await sse.close()

        again = await open_sse(s, gateway.url + LOG, params={"recent": "2"})
        recent = [await again.next() for _ in range(2)]
        assert [f.data["payload"]["tweet"] for f in recent] == ["alice:1", "alice:2"]
        await again.close()


async def test_the_log_needs_a_token_and_a_sane_recent_count(gateway: ServedGateway) -> None:
    async with aiohttp.ClientSession() as s:
        anonymous = await s.get(gateway.url + LOG)
        assert (anonymous.status, (await anonymous.json())["code"]) == (401, "token_missing")
        writer_only = await s.get(gateway.url + LOG,
                                  headers=gateway.headers("alice", scope="publish"))  # fmt: skip
        assert (writer_only.status, (await writer_only.json())["code"]) == (
            403, "insufficient_scope",
        )  # fmt: skip
        # "²" and "٣" are digits to str.isdigit(), and not to int() or to a person.
        for bad in ("-1", "101", "x", "²", "٣", "1²"):
            resp = await s.get(gateway.url + LOG, params={"recent": bad},
                               headers=gateway.headers("alice"))  # fmt: skip
            assert (resp.status, (await resp.json())["code"]) == (400, "invalid_parameter")


async def test_the_log_feed_is_off_in_production(tight_gateway: ServedGateway) -> None:
    async with aiohttp.ClientSession(headers=tight_gateway.headers("alice")) as s:
        resp = await s.get(tight_gateway.url + LOG)
        assert (resp.status, (await resp.json())["code"]) == (404, "not_found")
