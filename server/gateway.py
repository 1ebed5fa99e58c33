"""The state one gateway process shares between its endpoints, and its lifecycle.

Nothing here is needed by another process: the store holds the log, the views and the epoch,
so any number of gateways can serve side by side and a client may resume on any of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter

from liveviews.app import App, View, load_app
from liveviews.changes.topic import VIEWS_FRONTIER
from liveviews.gateway.admission import Admission
from liveviews.gateway.api.publish import Publisher
from liveviews.gateway.auth import Authenticator, Claims, Principal
from liveviews.gateway.errors import Forbidden, NotFound
from liveviews.gateway.fanout.hub import Hub
from liveviews.gateway.fanout.subscription import Source
from liveviews.gateway.feed import nodes, store
from liveviews.gateway.feed.changes import ChangeFeed
from liveviews.gateway.feed.cuts import Cuts
from liveviews.gateway.feed.kafkalog import KafkaLogFeed
from liveviews.gateway.feed.log import LogFeed, StoreLogFeed
from liveviews.gateway.feed.queries import Reads
from liveviews.gateway.feed.waits import StreamWaits
from liveviews.gateway.feed.wants import Wants
from liveviews.gateway.keys import ProviderKeys
from liveviews.gateway.live.sse import sse_cohort
from liveviews.gateway.live.ticker import Ticker
from liveviews.gateway.metrics import Metrics
from liveviews.gateway.presence import Presence
from liveviews.gateway.settings import GatewaySettings

log = logging.getLogger("liveviews.gateway")


def authenticator(settings: GatewaySettings) -> Authenticator:
    """The gateway's secret and, where one is named, its identity provider's keys."""
    provider = (
        ProviderKeys(settings.jwt_algorithms, settings.jwks_url, settings.jwt_issuer)
        if settings.provider
        else None
    )
    return Authenticator(
        settings.jwt_secret, settings.jwt_audience, settings.cors_origins, provider=provider,
        claims=Claims(settings.jwt_subject_claim, settings.jwt_scope_claim),
        leeway=settings.jwt_leeway_seconds,
    )  # fmt: skip


class Gateway:
    """Settings, application, store clients, hub and change feed of one process."""

    def __init__(self, settings: GatewaySettings, app: App | None = None) -> None:
        self.settings = settings
        self.app = app if app is not None else load_app(settings.store.app)
        self.auth = authenticator(settings)
        self.metrics = Metrics()
        self.admission = Admission(settings, self.metrics)
        self.layout = store.Layout(settings.store.log_partitions, settings.store.change_shards)
        self.client = store.connect(settings.store.store_url)
        self.publisher = Publisher(settings, self.app, self.client, self.metrics)
        self.feed_client = store.connect(
            settings.store.store_url, blocking_ms=settings.feed_block_ms
        )
        # A view's subscribers follow the frontier of the pipeline that writes it: a pipeline
        # that runs its micro-batches seconds apart does not hold back the others' views.
        self.owners = {v: self.app.owner_of(v) or VIEWS_FRONTIER for v in self.app.views}
        self.ticker = Ticker(settings.heartbeat_seconds, self.metrics)
        # Waits on the views of pipelines in Real-Time Mode end their epochs sooner.
        self.wants = Wants(self.client, [n for n, p in self.app.pipelines.items() if p.realtime])
        self.stream_waits = StreamWaits()
        self.hub = Hub(
            self.metrics,
            settings.progress_interval_ms / 1000,
            self.frontier_of,
            quiet_interval=settings.quiet_progress_ms / 1000,
            new_cohort=lambda: sse_cohort(self.ticker, self.metrics),
            on_wait=self.wants.tell,
        )
        # The cuts this process's groups of subscriptions are released at.
        self.cuts = Cuts(self.client, settings.store.log_partitions, self._cuts_refused(settings))
        self.feed = ChangeFeed(
            self.feed_client,
            self.hub,
            self.layout,
            self.metrics,
            block_ms=settings.feed_block_ms,
            views_of={name: set(p.views) for name, p in self.app.pipelines.items()},
            stream_waits=self.stream_waits,
            cuts=self.cuts,
        )
        self.source = Source(
            self.client,
            self.layout,
            self.hub,
            self.feed,
            self.frontier_of,
            settings.subscriber_buffer,
            self.metrics,
        )
        self.reads = Reads(self.client)
        """The scripts that read query-shaped subscriptions (``liveviews.gateway.fanout.query``)."""
        self.log_feed = self._log_feed(settings) if settings.log_feed else None
        self._feed_task: asyncio.Task[None] | None = None
        # What `liveviews status` shows of this process: connections, subscribers per view.
        self.presence = Presence(
            self.client,
            lambda: self.metrics.connections,
            lambda: dict(Counter(sub.view for sub in self.hub.all)),
        )
        self._presence_task: asyncio.Task[None] | None = None

    def _cuts_refused(self, settings: GatewaySettings) -> str | None:
        """Why groups cannot be released here, if they cannot: a cut is read at one instant of
        a single server's log, and each pipeline's source must stop at it."""
        if settings.store.kafka:
            return ("a group of views is released at positions every pipeline of the group ends "
                    "a micro-batch at, and Spark's Kafka source cannot be made to stop at one: "
                    "on a Kafka log, follow the views one by one.")  # fmt: skip
        if nodes.is_cluster(self.client):
            return ("a group of views is released at positions read at one instant of every "
                    "log partition, which a store cluster cannot read: follow the views one by "
                    "one, or use a single store server.")  # fmt: skip
        return None

    @staticmethod
    def _log_feed(settings: GatewaySettings) -> LogFeed:
        """``/v1/log/live``'s reader of the store's log, or of the Kafka log ``LV_KAFKA``
        names."""
        s = settings.store
        if s.kafka:
            return KafkaLogFeed(s.kafka, s.kafka_topic, s.log_partitions,
                                buffer=settings.subscriber_buffer,
                                block_ms=settings.feed_block_ms)  # fmt: skip
        return StoreLogFeed(store.connect(s.store_url, blocking_ms=settings.feed_block_ms),
                            s.log_partitions, buffer=settings.subscriber_buffer,
                            block_ms=settings.feed_block_ms)  # fmt: skip

    async def start(self) -> None:
        if self._feed_task is not None:
            raise RuntimeError("Cannot start a gateway twice.")
        self._feed_task = asyncio.create_task(self.feed.run(), name="liveviews-change-feed")
        self._presence_task = asyncio.create_task(self.presence.run(), name="liveviews-presence")
        # Serve sooner rather than never: with the store down the feed keeps retrying and
        # subscriptions answer 503 until it has started.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self.feed.started.wait()), 5.0)

    async def stop(self) -> None:
        for task in (self._feed_task, self._presence_task):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._feed_task = self._presence_task = None
        await self.presence.withdraw()
        await self.ticker.stop()
        self.hub.close()
        if self.log_feed is not None:
            await self.log_feed.stop()
        await asyncio.to_thread(self.publisher.close)  # flushes a Kafka producer
        await nodes.close(self.client)
        await nodes.close(self.feed_client)

    async def ready(self) -> tuple[bool, str]:
        try:
            await self.client.ping()
        except store.STORE_ERRORS as exc:
            return False, f"the store is unreachable: {exc}"
        if not self.feed.healthy:
            return False, "the change feed is not reading the change topic"
        return True, "ready"

    def frontier_of(self, view: str) -> str:
        """The frontier ``view`` reflects: that of the version of its pipeline that serves
        readers (``entities``, ``entities@v2``), or every view's if no pipeline writes it."""
        owner = self.owners.get(view, VIEWS_FRONTIER)
        if owner == VIEWS_FRONTIER:
            return owner
        return owner + self.feed.namespaces.get(owner, "")

    def readable_view(self, principal: Principal, view: str, key: str) -> View:
        """The view, if it exists and its read rule lets ``principal`` read ``key``."""
        v = self.app.views.get(view)
        if v is None:
            raise NotFound(
                f"there is no view {view!r}; views: {', '.join(sorted(self.app.views))}.",
                code="unknown_view",
            )
        if not key or len(key) > 256:
            raise NotFound("a view key is 1 to 256 characters long.", code="invalid_key")
        if principal.service:
            log.info("service %r reads %s/%s", principal.subject, view, key)
        elif not v.readable(principal.subject, key):
            raise Forbidden(f"{principal.subject!r} may not read {view}/{key}.", code="forbidden")
        return v
