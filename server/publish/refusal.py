"""A store that refuses writes for a reason of its own, said as the gateway's answer.

A store takes no writes while it has too few replicas for ``min-replicas-to-write``
(``NOREPLICAS``: the embedded store's guard sets it before its disk fills,
``liveviews.store.diskguard``, and records why), while it cannot write its disk (``MISCONF``),
or when it is a replica (``READONLY``). Each is an answer about the store, not the request:
503, with the recorded reason when there is one.
"""

from __future__ import annotations

from typing import Any

import orjson
from redis.exceptions import RedisError, ResponseError

from liveviews.gateway.errors import Unavailable
from liveviews.store.diskguard import REFUSAL_KEY

REFUSALS = ("NOREPLICAS", "MISCONF", "READONLY")


def refuses_writes(exc: BaseException) -> bool:
    return isinstance(exc, ResponseError) and str(exc).startswith(REFUSALS)


async def writes_refused(client: Any) -> Unavailable:
    """503: the recorded reason (``store_disk_full``), or ``store_read_only``."""
    try:
        recorded = await client.get(REFUSAL_KEY)
    except RedisError:
        recorded = None
    if recorded:
        reason = orjson.loads(recorded)
        return Unavailable(reason["message"], code=reason["code"])
    return Unavailable(
        "the store takes no writes now (it has too few replicas, cannot write its disk, or is a "
        "replica), so no event is taken: try again shortly. Operators: see the store's log.",
        code="store_read_only",
    )
