"""The SSE endpoint people write by hand: one ``XREAD BLOCK`` per subscriber on the change topic.

A baseline for the fan-out benchmark, not a gateway: no auth, no snapshot, no resume, no
progress. Each subscriber loops on a blocking read of the shard stream that holds its key and
forwards that key's deltas through sse-starlette. Run it under uvicorn::

    REDIS_URL=redis://127.0.0.1:6379/0 uvicorn bench.baselines.naive_gateway:app
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from typing import Any, cast

import redis.asyncio as redis
from sse_starlette.sse import EventSourceResponse
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.routing import Route

from liveviews.changes.topic import changes_stream, shard_for

SHARDS = int(os.environ.get("LV_CHANGE_SHARDS", "16"))
# One pooled connection per waiting subscriber: the pool must not cap them.
client = redis.Redis.from_url(
    os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"), max_connections=100_000
)


async def live(request: Request) -> EventSourceResponse:
    view, key = request.path_params["view"], request.path_params["key"]
    stream = changes_stream(shard_for(view, key, SHARDS))

    async def deltas() -> AsyncIterator[dict[str, Any]]:
        last: bytes | str = "$"
        while True:
            reply = cast(
                list[tuple[bytes, list[tuple[bytes, dict[bytes, bytes]]]]],
                await client.xread({stream: last}, block=15_000, count=100),
            )
            for _, entries in reply:
                for entry_id, fields in entries:
                    last = entry_id
                    if fields[b"view"].decode() == view and fields[b"key"].decode() == key:
                        yield {"event": "delta", "id": entry_id.decode(),
                               "data": fields[b"ops"].decode()}  # fmt: skip

    return EventSourceResponse(deltas())


app = Starlette(routes=[Route("/v1/views/{view}/{key}/live", live)])
