"""Read-your-writes waits, told to the pipelines in Real-Time Mode.

A pipeline in Real-Time Mode moves its frontier only when an epoch ends (docs/REALTIME.md), so
a client's ``wait`` for its own write would take the rest of the epoch. Its source ends the
epoch sooner once it has read the positions some client waits for: this process tells them on
``lv:{m}:wants`` (``WANTS_STREAM``), at most one entry in flight, the waits that came meanwhile
merged into the next. Waits on views of micro-batch pipelines are not told: their frontier
moves with every batch. A want is only a hint: lost, the epoch still ends on time.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Any

from liveviews.changes.topic import WANTS_MAXLEN, WANTS_STREAM
from liveviews.gateway.fanout.lane import Wanted
from liveviews.gateway.feed.store import STORE_ERRORS, Client

log = logging.getLogger("liveviews.gateway.wants")


class Wants:
    """Tells ``WANTS_STREAM`` the positions waited for on the frontiers ``realtime`` names."""

    def __init__(self, client: Client, realtime: Iterable[str]) -> None:
        self.client = client
        self.realtime = frozenset(realtime)
        self.pending: Wanted = {}
        self.task: asyncio.Task[None] | None = None

    def tell(self, frontier: str, wanted: Wanted) -> None:
        """Called from the hub, which never awaits: the entry goes out from a task."""
        if frontier not in self.realtime or not wanted:
            return
        for partition, position in wanted.items():
            if position > self.pending.get(partition, (-1, -1)):
                self.pending[partition] = position
        if self.task is None or self.task.done():
            self.task = asyncio.get_running_loop().create_task(self._send())

    async def _send(self) -> None:
        while self.pending:
            fields: dict[Any, Any] = {p: f"{ms}-{seq}" for p, (ms, seq) in self.pending.items()}
            self.pending = {}
            try:
                await self.client.xadd(WANTS_STREAM, fields, maxlen=WANTS_MAXLEN)
            except STORE_ERRORS as exc:
                log.debug("could not tell a wait to the pipelines: %s", exc)
