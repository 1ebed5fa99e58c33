"""``lag_ms`` in the REST snapshot: the pipeline's lag at its last batch, part of the ETag, and
left out when the pipeline did not record one."""

from __future__ import annotations

import aiohttp
import redis

from liveviews.changes.topic import FRONTIER_LAG_KEY
from liveviews.log.events import log_stream
from tests.support.gateway import ServedGateway, Writer

URL = "/v1/views/profiles/alice"


async def test_the_snapshot_says_how_far_its_pipeline_was_behind_the_log(
    gateway: ServedGateway, store: redis.Redis, writer: Writer
) -> None:
    for entry_id in ("1000-0", "4000-0"):
        store.xadd(log_stream(0), {"type": "x"}, id=entry_id)
    writer.write([("profiles", "alice", "profile", {"name": "A"})], {0: "1000-0"})

    async with aiohttp.ClientSession(headers=gateway.headers()) as s:
        first = await s.get(gateway.url + URL)
        body = await first.json()
        assert body["frontier"] == {"0": "1000-0"}
        assert body["lag_ms"] == 3000  # the log's head was appended 3 s after the frontier
        etag = first.headers["ETag"]

        # A batch that reads nothing new keeps the frontier and the rows, not the lag: the
        # answer changed, and so does its ETag.
        store.xadd(log_stream(0), {"type": "x"}, id="6000-0")
        writer.write([], {0: "1000-0"})
        later = await s.get(gateway.url + URL, headers={"If-None-Match": etag})
        assert later.status == 200 and later.headers["ETag"] != etag
        assert (await later.json())["lag_ms"] == 5000

        writer.write([], {0: "6000-0"})
        caught_up = await (await s.get(gateway.url + URL)).json()
        assert caught_up["lag_ms"] == 0

        store.hdel(FRONTIER_LAG_KEY, "profiles")  # a pipeline that records no lag
        unknown = await (await s.get(gateway.url + URL)).json()
        assert "lag_ms" not in unknown
        assert unknown["rows"] == {"profile": {"name": "A"}}
