"""Store commands tried again through an outage: a store restarting, or a primary of a store
cluster failing over to its replica.

A failover shows its clients a few seconds of refused connections, then ``MOVED`` and
``CLUSTERDOWN`` replies until every node has learnt the new primary. redis-py's own retries
cover a single command; a pipeline of a cluster client, or one of a node's client, fails at
the first of them. Only what is safe to repeat goes through ``retrying``: the source's reads,
and a micro-batch's writes, which are idempotent by batch id.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from typing import TypeVar

import redis
from redis.exceptions import RedisClusterException

from streaming.core.storeclient import Client, NotReplicated, refresh

log = logging.getLogger("liveviews.store")

T = TypeVar("T")

RETRIED = (
    redis.ConnectionError,
    redis.TimeoutError,
    redis.exceptions.ClusterError,  # CLUSTERDOWN
    redis.exceptions.AskError,  # MOVED too
    redis.exceptions.TryAgainError,
    redis.exceptions.ReadOnlyError,
    RedisClusterException,  # "slots not covered" while the cluster fails over
    NotReplicated,
)
"""Errors after which an idempotent command is tried again."""
OUTAGE_S = 30.0
"""How long a command is tried again before its error is raised: a failover takes 2-4 s with
the local cluster's node timeout, 15-20 s with a deployment's default."""


def retrying(command: Callable[[], T], client: Client, what: str) -> T:
    """``command()`` until it succeeds, for about ``OUTAGE_S``, learning the cluster's slots
    again after each failure. ``command`` must be safe to repeat."""
    deadline = time.monotonic() + OUTAGE_S
    delay = 0.05
    while True:
        try:
            return command()
        except RETRIED as exc:
            if time.monotonic() + delay > deadline:
                raise
            log.warning("%s: %s; trying again in %.2f s", what, exc, delay)
            time.sleep(delay)
            delay = min(2.0, delay * 2)
            with contextlib.suppress(redis.RedisError, RedisClusterException, OSError):
                refresh(client)  # a cluster that does not serve every slot yet: next time
