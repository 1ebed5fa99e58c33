"""The gateway's appends to the log: ``liveviews.log.append`` with the asyncio client.

On a single server a batch is one MULTI of its partitions' calls, sent as commands so that
``WAIT`` follows on the same connection. On a store cluster each partition's call runs on the
server of its slot (a plain client of it, ``nodes.node``), all partitions at once, each retried
through a failover for ``budget`` seconds; ``append.settle`` turns the outcomes into offsets or
the error to answer (``PartialAppend`` when some partitions were written and some were not).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from redis.exceptions import RedisError

from liveviews.gateway.feed import nodes
from liveviews.gateway.feed.nodes import Client
from liveviews.log.append import (
    SCRIPT,
    Call,
    Idempotency,
    Outcome,
    call_ids,
    calls,
    check_records,
    settle,
    transaction_outcomes,
)
from liveviews.log.events import Event, Offset
from liveviews.log.retention import Retention
from liveviews.store import client as storeclient
from liveviews.store.client import FAILOVER_ERRORS, FAILOVER_SECONDS


class Appender:
    """Appends validated batches for one gateway process (the script registered once)."""

    def __init__(
        self,
        client: Client,
        partitions: int,
        retention: Retention | None,
        *,
        ack_replicas: int = 0,
        budget: float = FAILOVER_SECONDS,
    ) -> None:
        self.client = client
        self.partitions = partitions
        self.retention = retention
        self.ack_replicas = ack_replicas
        self.budget = budget
        self.script = client.register_script(SCRIPT)

    async def append(self, events: Sequence[Event], idempotency: Idempotency) -> list[Offset]:
        if not events:
            return []
        cluster = nodes.is_cluster(self.client)
        batch = calls(events, self.partitions, self.retention, idempotency,
                      single_server=not cluster)  # fmt: skip
        if cluster:
            if idempotency.given:
                check_records(idempotency, await self._records(batch))
            outcomes = list(await asyncio.gather(*(self._on_node(call) for call in batch)))
        else:
            outcomes = await self._in_transaction(batch)
        return settle(len(events), batch, outcomes)

    async def _records(self, batch: Sequence[Call]) -> list[Any]:
        """The batch's records as they are now, one read per partition's server; one that
        cannot be read is left to its partition's call, which checks it too."""

        async def read(call: Call) -> Any:
            try:
                return await (await nodes.node(self.client, call.keys[1])).get(call.keys[1])
            except (RedisError, OSError):
                return None

        return list(await asyncio.gather(*(read(call) for call in batch)))

    async def _in_transaction(self, batch: Sequence[Call]) -> list[Outcome]:
        pipe: Any
        async with self.client.pipeline(transaction=False) as pipe:
            pipe.execute_command("MULTI")
            for call in batch:
                await self.script(keys=call.keys, args=call.args, client=pipe)
            pipe.execute_command("EXEC")
            acknowledged = storeclient.queue_acknowledge(pipe, self.ack_replicas)
            results = await pipe.execute()
        return transaction_outcomes(results, len(batch), self.ack_replicas, acknowledged)

    async def _on_node(self, call: Call) -> Outcome:
        async def run() -> list[Any]:
            server = await nodes.node(self.client, call.keys[0])
            async with server.pipeline(transaction=False) as pipe:
                await self.script(keys=call.keys, args=call.args, client=pipe)
                acknowledged = storeclient.queue_acknowledge(pipe, self.ack_replicas)
                results: Any = await pipe.execute()
            return call_ids(results, call, self.ack_replicas, acknowledged)

        # Tried again through a failover only: after NotReplicated the call would find its
        # record and write nothing, so a WAIT after it would confirm nothing.
        try:
            return await nodes.on_node(self.client, run, self.budget)
        except (RedisError, *FAILOVER_ERRORS) as exc:
            return exc
