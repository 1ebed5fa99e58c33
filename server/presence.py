"""This gateway process's report for ``liveviews status``, kept fresh in the store.

Every ``REPORT_SECONDS`` the process writes its field of ``lv:gateways``
(``liveviews.gateway.report``): its connections and its subscribers per view. A process that
stops without withdrawing (killed, or cut off from the store) leaves a field that stops being
refreshed; readers leave it out after ``STALE_SECONDS``, and any gateway deletes it now and
then, so the hash does not grow with every process that ever ran.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import orjson

from liveviews.gateway.feed.nodes import Client as StoreClient
from liveviews.gateway.feed.store import STORE_ERRORS, end_if_cancelled
from liveviews.gateway.report import (
    GATEWAYS_KEY,
    REPORT_SECONDS,
    STALE_SECONDS,
    encode,
    own_name,
)

log = logging.getLogger("liveviews.gateway.presence")


class Presence:
    """Writes this process's report until cancelled; ``withdraw`` removes it at shutdown.

    ``connections`` and ``subscribers`` are read at each report, on the event loop.
    """

    def __init__(
        self,
        client: StoreClient,
        connections: Callable[[], int],
        subscribers: Callable[[], dict[str, int]],
        *,
        interval: float = REPORT_SECONDS,
        stale: float = STALE_SECONDS,
        name: str | None = None,
    ) -> None:
        self.client = client
        self.connections = connections
        self.subscribers = subscribers
        self.interval = interval
        self.stale = stale
        self.name = own_name() if name is None else name
        self._pruned_at: float | None = None
        self._failing = False

    async def run(self) -> None:
        """Report every ``interval`` seconds, forever. A store error is logged (once, until the
        store answers again) and the next report tries again: the process serves without it."""
        while True:
            try:
                await self.report()
            except STORE_ERRORS as exc:
                if not self._failing:
                    log.warning("cannot write this gateway's report to the store: %s", exc)
                self._failing = True
            else:
                if self._failing:
                    log.info("this gateway's report is written to the store again")
                self._failing = False
            end_if_cancelled()
            await asyncio.sleep(self.interval)

    async def report(self) -> None:
        # The store's clock, which every gateway and ``liveviews status`` share: on this
        # process's own, a clock set back would hide its report and one set ahead prune others'.
        seconds, micros = await self.client.time()
        now = seconds + micros / 1_000_000
        await self.client.hset(
            GATEWAYS_KEY, self.name, encode(self.connections(), self.subscribers(), now)
        )
        if self._pruned_at is None or now - self._pruned_at >= self.stale:
            await self._prune(now)
            self._pruned_at = now

    async def _prune(self, now: float) -> None:
        """Delete the reports of other processes not refreshed for ``stale`` seconds. Should
        one come back between the read and the delete, its next report writes it again."""
        raw: Any = await self.client.hgetall(GATEWAYS_KEY)
        gone = [name for name, report in raw.items()
                if name.decode() != self.name and _older(report, now - self.stale)]  # fmt: skip
        if gone:
            await self.client.hdel(GATEWAYS_KEY, *gone)

    async def withdraw(self) -> None:
        """Remove this process's report; a store error is logged, the field then goes stale."""
        try:
            await self.client.hdel(GATEWAYS_KEY, self.name)
        except STORE_ERRORS as exc:
            log.warning("cannot remove this gateway's report from the store: %s", exc)


def _older(report: bytes, than: float) -> bool:
    """Was ``report`` written before ``than``? A field that is not a report is left alone:
    it may be a newer gateway's."""
    try:
        at = orjson.loads(report)["at"]
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return False
    return isinstance(at, int | float) and at < than
