"""The process's counters, gauges and histograms, rendered in the Prometheus text format at
/metrics.

Two kinds, rendered one after the other. The figures bumped on the delivery path of every frame
are plain attributes: an attribute add costs ~15 ns where prometheus_client's ``Counter.inc``
costs ~210 ns, beside ~0.27 µs per delivery in all (docs/performance/metrics.md). The rest are
prometheus_client's, in a registry of this ``Metrics`` alone (``Figures``): the latency of each
push, and what the pipelines did, read from the store at each scrape. No figure has a label
naming a user or a key: their number would grow with the audience.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson
from prometheus_client import CollectorRegistry, Gauge, Histogram, Metric, generate_latest
from redis.exceptions import RedisError

from liveviews.changes.lag import EVENT_CAP, Lag, Plan
from liveviews.changes.topic import FRONTIER_KEY, PROGRESS_STREAM, split_physical
from liveviews.gateway.feed.nodes import Client as StoreClient
from liveviews.log.eventlog import heads_of, queue_heads
from liveviews.log.events import entry_id_tuple
from liveviews.log.kafka import lag as kafka_lag
from liveviews.log.kafka.topic import LogUnavailable
from liveviews.pipeline.versions import REGISTRY_KEY, Versions

KafkaLog = tuple[str, str]
"""A Kafka log's bootstrap servers and topic."""
log = logging.getLogger("liveviews.gateway.metrics")

PIPELINE_PROGRESS_STREAM = "lv:pipeline:progress"
"""Spark's figures per micro-batch (``liveviews.pipeline.progress``, which the gateway does not
import: it imports Spark)."""
QUERY_PREFIX = "liveviews."
"""A pipeline's streaming query is named ``liveviews.<pipeline version>``
(``liveviews.pipeline``)."""
FIRST_WINDOW_SECONDS = 600.0
"""A process's first scrape reads the pipelines' figures of the last ten minutes."""
PAGE = 1000
MAX_PAGES = 20
"""At most this many pages of a stream per scrape; the next scrape goes on from there."""
"""Entries of a stream from an id on, up to a count, counted where they are."""


@dataclass
class Metrics:
    sse_connections: int = 0
    ws_connections: int = 0
    ws_unauthenticated: int = 0
    connections_refused: dict[str, int] = field(
        default_factory=lambda: dict.fromkeys(
            ("process", "subject", "address", "unauthenticated"), 0
        )
    )
    subscriptions: int = 0
    deltas_in: int = 0
    deltas_out: int = 0
    frames_out: int = 0
    bytes_out: int = 0
    slow_consumers: int = 0
    resets: int = 0
    events_published: int = 0
    publishes_rate_limited: int = 0
    publishes_refused_store_full: int = 0
    feed_reads: int = 0
    feed_errors: int = 0
    feed_lag_seconds: float = 0.0
    store_epoch_changes: int = 0
    figures: Figures = field(default_factory=lambda: Figures(), repr=False, compare=False)

    @property
    def connections(self) -> int:
        return self.sse_connections + self.ws_connections

    def frontier_pushed(self, frontier: dict[str, str], now: float) -> None:
        """A frontier was handed to the subscribers at ``now`` (unix seconds): observe how long
        ago the newest log entry it covers was appended. Called once per progress entry."""
        try:
            # A Kafka log's positions (no "-") hold no time: nothing to measure there.
            newest = max((int(i.partition("-")[0]) for i in frontier.values() if "-" in i),
                         default=0)  # fmt: skip
        except ValueError:
            return  # not an entry id: nothing to measure, and the feed must not stop for it
        if newest:
            self.figures.push_latency.observe(max(0.0, now - newest / 1000))

    async def scrape(
        self,
        client: StoreClient,
        partitions: int,
        pipelines: Collection[str],
        subscribers: dict[str, int],
        kafka: KafkaLog | None = None,
    ) -> str:
        """The registry's text, after reading the pipelines' figures from the store (and their
        lag from ``kafka``'s log when it holds the log)."""
        return await self.figures.scrape(client, partitions, pipelines, subscribers, kafka)

    def render(self) -> str:
        rows: list[tuple[str, str, str, list[tuple[str, float]]]] = [
            ("lv_connections", "gauge", "Open client connections.",
             [('{transport="sse"}', self.sse_connections),
              ('{transport="ws"}', self.ws_connections)]),
            ("lv_unauthenticated_sockets", "gauge",
             "WebSockets open but not signed in yet (not counted in lv_connections).",
             [("", self.ws_unauthenticated)]),
            ("lv_connections_refused_total", "counter",
             "Connections refused for a spent budget (the process's, a subject's, an "
             "address's, or that of sockets not signed in).",
             [(f'{{budget="{k}"}}', v) for k, v in self.connections_refused.items()]),
            ("lv_subscriptions", "gauge", "Subscriptions attached to the hub.",
             [("", self.subscriptions)]),
            ("lv_deltas_in_total", "counter", "Deltas read from the change topic.",
             [("", self.deltas_in)]),
            ("lv_deltas_out_total", "counter", "Delta frames delivered to subscribers.",
             [("", self.deltas_out)]),
            ("lv_frames_out_total", "counter", "Frames of every kind delivered.",
             [("", self.frames_out)]),
            ("lv_bytes_out_total", "counter", "Bytes of frames handed to client connections.",
             [("", self.bytes_out)]),
            ("lv_slow_consumer_total", "counter",
             "Subscriptions ended because their buffer overflowed.", [("", self.slow_consumers)]),
            ("lv_resets_total", "counter", "Reset frames sent (resume impossible).",
             [("", self.resets)]),
            ("lv_events_published_total", "counter", "Events appended to the log.",
             [("", self.events_published)]),
            ("lv_publishes_refused_total", "counter", "Publishes refused by a limit.",
             [('{reason="rate_limited"}', self.publishes_rate_limited),
              ('{reason="store_full"}', self.publishes_refused_store_full)]),
            ("lv_change_feed_reads_total", "counter", "Reads of the change topic.",
             [("", self.feed_reads)]),
            ("lv_change_feed_errors_total", "counter", "Failed reads of the change topic.",
             [("", self.feed_errors)]),
            ("lv_change_feed_lag_seconds", "gauge",
             "Age of the newest delta when this process read it.", [("", self.feed_lag_seconds)]),
            ("lv_store_epoch_changes_total", "counter",
             "Times the store was found wiped or replaced.", [("", self.store_epoch_changes)]),
        ]  # fmt: skip
        out = []
        for name, kind, help_text, samples in rows:
            out.append(f"# HELP {name} {help_text}")
            out.append(f"# TYPE {name} {kind}")
            out.extend(f"{name}{labels} {value}" for labels, value in samples)
        return "\n".join(out) + "\n"


class _HasView(Protocol):
    @property
    def view(self) -> str: ...


def subscribers_by_view(subscribers: Iterable[_HasView], views: Iterable[str]) -> dict[str, int]:
    """How many of ``subscribers`` follow each view; every view of ``views`` is named, with 0."""
    counts = dict.fromkeys(views, 0)
    for sub in subscribers:
        counts[sub.view] = counts.get(sub.view, 0) + 1
    return counts


PIPELINE = ("pipeline", "version")


class Figures:
    """The prometheus_client side: one registry per process (per ``Metrics``), so that two
    gateways in one test process do not mix their figures."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.push_latency = Histogram(
            "lv_push_latency_seconds",
            "From an event's append to the log to the push of the first frontier covering it.",
            registry=r,
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
        )
        self.batch_duration = Histogram(
            "lv_pipeline_batch_duration_seconds",
            "Spark's triggerExecution of each micro-batch of a pipeline version.",
            PIPELINE,
            registry=r,
            buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
        )
        self.rows_changed = Histogram(
            "lv_pipeline_rows_changed",
            "Row changes each micro-batch of a pipeline version wrote.",
            PIPELINE,
            registry=r,
            buckets=(0, 1, 10, 100, 1_000, 10_000, 100_000, 1_000_000),
        )
        self.lag_events = Gauge(
            "lv_pipeline_lag_events",
            f"Log events after the frontier of a pipeline version now (at most {EVENT_CAP} "
            "counted per partition); the version serving readers and the one being built.",
            PIPELINE,
            registry=r,
        )
        self.lag_seconds = Gauge(
            "lv_pipeline_lag_seconds",
            "How much older the frontier of a pipeline version is than the log's head now, in "
            "append time; the version serving readers and the one being built.",
            PIPELINE,
            registry=r,
        )
        self.view_subscribers = Gauge(
            "lv_view_subscribers", "Subscribers of each view in this process.", ("view",),
            registry=r,
        )  # fmt: skip
        self._batches = _Tail(PIPELINE_PROGRESS_STREAM)
        self._progress = _Tail(PROGRESS_STREAM)
        self._observed: set[tuple[str, str]] = set()
        # Two scrapes at once would read the streams from the same cursor and count twice.
        self._lock = asyncio.Lock()

    async def scrape(
        self,
        client: StoreClient,
        partitions: int,
        pipelines: Collection[str],
        subscribers: dict[str, int],
        kafka: KafkaLog | None = None,
    ) -> str:
        async with self._lock:
            cursors = self._batches.after, self._progress.after
            try:
                read = await self._read(client, partitions, pipelines, kafka)
            except (RedisError, OSError, ValueError, TypeError, KeyError, LogUnavailable) as exc:
                # The store is away (/readyz says so) or holds what this gateway cannot read:
                # the other figures still count, and the next scrape reads these entries again.
                self._batches.after, self._progress.after = cursors
                read = None
                if not isinstance(exc, RedisError | OSError):
                    log.warning("/metrics could not read the pipelines' figures: %r", exc)
            # No await from here on: the gauges are set and rendered as one picture.
            self.view_subscribers.clear()
            for view, n in subscribers.items():
                self.view_subscribers.labels(view).set(n)
            self.lag_events.clear()
            self.lag_seconds.clear()
            if read is not None:
                self._apply(read)
            return generate_latest(_WithoutCreated(self.registry)).decode()

    async def _read(
        self,
        client: StoreClient,
        partitions: int,
        pipelines: Collection[str],
        kafka: KafkaLog | None = None,
    ) -> _Read:
        async with client.pipeline(transaction=False) as pipe:
            pipe.hgetall(REGISTRY_KEY)
            pipe.hgetall(FRONTIER_KEY)
            registry_raw, frontiers_raw = await pipe.execute()
        registry = {
            p.decode(): Versions.decode(p.decode(), v)
            for p, v in registry_raw.items()
            if p.decode() in pipelines
        }
        frontiers = {k.decode(): v for k, v in frontiers_raw.items()}
        targets: dict[str, tuple[str, str]] = {}  # qualified name -> (pipeline, version)
        for name in sorted(pipelines):
            found = registry.get(name)
            if found is None:
                if name in frontiers:  # a store written before versions were registered
                    targets[name] = (name, "")
                continue
            for v in (found.active, found.next):
                if v is not None:
                    targets[v.qualified(name)] = (name, v.version)
        followed = {q: _frontier(frontiers.get(q)) for q in targets}
        if kafka is not None:  # its client blocks: on a thread, as a scrape is rare
            lags = await asyncio.to_thread(kafka_lag.measure_all, *kafka, partitions, followed)
        else:
            lags = await measure_all(client, partitions, followed)
        now = time.time()
        batches = await self._batches.read(client, now)
        progress = await self._progress.read(client, now)
        return _Read(pipelines, registry, targets, lags, batches, progress)

    def _apply(self, read: _Read) -> None:
        for qualified, target in read.targets.items():
            lag = read.lags[qualified]
            self.lag_events.labels(*target).set(lag.events)
            self.lag_seconds.labels(*target).set(lag.ms / 1000)
        for _, fields in read.batches:
            query = fields.get(b"query", b"").decode()
            if not query.startswith(QUERY_PREFIX):
                continue
            labels = read.labels(query.removeprefix(QUERY_PREFIX))
            duration = _trigger_seconds(fields.get(b"duration_ms"))
            if labels and duration is not None:
                self.batch_duration.labels(*labels).observe(duration)
                self._observed.add(labels)
        for _, fields in read.progress:
            # Entries of a switch (batch -1) and of the views' frontier wrote no rows.
            labels = read.labels(fields.get(b"pipeline", b"").decode())
            rows = _whole(fields.get(b"rows"))
            if labels and rows is not None and fields.get(b"batch") != b"-1":
                self.rows_changed.labels(*labels).observe(rows)
                self._observed.add(labels)
        # A version forgotten by the registry (its state deleted) leaves the histograms, so
        # that rebuilds do not add series forever.
        for labels in sorted(self._observed - read.known()):
            for histogram in (self.batch_duration, self.rows_changed):
                with contextlib.suppress(KeyError):  # observed in the other one only
                    histogram.remove(*labels)
            self._observed.discard(labels)


class _WithoutCreated:
    """The registry without the ``_created`` series prometheus_client adds beside each
    histogram: one more series per label set, saying only when this process began counting."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry

    def collect(self) -> Iterator[Metric]:
        for family in self.registry.collect():
            family.samples = [x for x in family.samples if not x.name.endswith("_created")]
            yield family


@dataclass
class _Read:
    """What one scrape read from the store."""

    pipelines: Collection[str]
    registry: dict[str, Versions]
    targets: dict[str, tuple[str, str]]
    lags: dict[str, Lag]
    batches: list[tuple[bytes, dict[bytes, bytes]]]
    progress: list[tuple[bytes, dict[bytes, bytes]]]

    def labels(self, qualified: str) -> tuple[str, str] | None:
        """``(pipeline, version)`` of a pipeline version's name (``entities@v2``), or None for
        a name of no pipeline of this application (the views' frontier ``liveviews``)."""
        pipeline, namespace = split_physical(qualified)
        if pipeline not in self.pipelines:
            return None
        if namespace:
            return pipeline, namespace[1:]
        # The first version a store ran keeps the bare names: its version is in the registry.
        found = self.registry.get(pipeline)
        for v in [found.active, found.next, *found.retired] if found else []:
            if v is not None and not v.namespace:
                return pipeline, v.version
        return pipeline, ""

    def known(self) -> set[tuple[str, str]]:
        out: set[tuple[str, str]] = set()
        for name in self.pipelines:
            found = self.registry.get(name)
            if found is None:
                out.add((name, ""))
                continue
            out |= {(name, v.version) for v in [found.active, found.next, *found.retired] if v}
        return out


def _frontier(raw: bytes | None) -> dict[int, str]:
    return {int(p): str(i) for p, i in orjson.loads(raw).items()} if raw else {}


def _whole(raw: bytes | None) -> int | None:
    return int(raw) if raw is not None and raw.isdigit() else None


def _trigger_seconds(raw: bytes | None) -> float | None:
    try:
        ms = orjson.loads(raw or b"{}").get("triggerExecution")
    except (orjson.JSONDecodeError, AttributeError):
        return None
    return ms / 1000 if isinstance(ms, int | float) else None


class _Tail:
    """Reads a stream forward from where the previous scrape stopped."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.after: str | None = None

    async def read(self, client: StoreClient, now: float) -> list[tuple[bytes, Any]]:
        newest: Any = await client.xrevrange(self.key, count=1)
        if not newest:
            self.after = None  # an empty or wiped stream: start again from the window
            return []
        if self.after is not None and entry_id_tuple(newest[0][0].decode()) < entry_id_tuple(
            self.after
        ):
            self.after = None  # the store was replaced by one whose stream is older
        start = f"({self.after}" if self.after else f"{int((now - FIRST_WINDOW_SECONDS) * 1000)}"
        out: list[tuple[bytes, Any]] = []
        for _ in range(MAX_PAGES):
            page: Any = await client.xrange(self.key, start, "+", count=PAGE)
            if not page:
                break
            out.extend(page)
            self.after = page[-1][0].decode()
            start = f"({self.after}"
            if len(page) < PAGE:
                break
        return out


async def measure_all(
    client: StoreClient, partitions: int, frontiers: dict[str, dict[int, str]]
) -> dict[str, Lag]:
    """``liveviews.changes.lag.measure_all`` with the gateway's asyncio client: the same reads and
    the same figures, on the gateway's one client and loop, with no second connection pool for
    the gateway to manage."""
    if not frontiers:
        return {}
    async with client.pipeline(transaction=False) as pipe:
        queue_heads(pipe, partitions)
        plan = Plan(heads_of(await pipe.execute()), frontiers)
    async with client.pipeline(transaction=False) as pipe:
        plan.queue(pipe)
        return plan.lags(await pipe.execute())
