"""Publishing: from a request body to offsets in the log, all or nothing.

A body is one event (``{"type", "payload", "time"?}``), an array of events, or
``{"events": [...]}``. Every event is validated against the application's schemas, with its
time near the gateway's clock, and must be authored by the token's subject; the store must have
room and the subject must be within its publish rate. Only then is anything written, once per
idempotency key (``liveviews.log.append``): on a single server the batch is one MULTI/EXEC,
every event or none; on a store cluster each partition's events are appended at once, and a
batch some of whose partitions could not be written answers 503 ``partial_append`` with the
offsets that were, which the same request with the same ``Idempotency-Key`` completes.
"""

from __future__ import annotations

import logging
from typing import Any

import orjson
from redis.exceptions import OutOfMemoryError, RedisError

from liveviews.app import App
from liveviews.errors import InvalidEvent
from liveviews.gateway.auth import Principal
from liveviews.gateway.errors import (
    BadRequest,
    Forbidden,
    PayloadTooLarge,
    TooManyRequests,
    Unavailable,
    Unprocessable,
)
from liveviews.gateway.feed import store
from liveviews.gateway.metrics import Metrics
from liveviews.gateway.publish.append import Appender
from liveviews.gateway.publish.kafka import KafkaAppender
from liveviews.gateway.publish.memory import StoreMemory, store_full
from liveviews.gateway.publish.ratelimit import PublishRate, retry_after
from liveviews.gateway.publish.refusal import refuses_writes, writes_refused
from liveviews.gateway.settings import GatewaySettings
from liveviews.log.append import (
    Idempotency,
    IdempotencyKeyReused,
    InvalidIdempotencyKey,
    NotAcknowledged,
    PartialAppend,
)
from liveviews.log.events import Offset, TimeWindow
from liveviews.log.kafka.topic import LogUnavailable

log = logging.getLogger("liveviews.gateway")


def parse_body(body: bytes) -> Any:
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise BadRequest(
            f"the body is not valid JSON ({exc.msg} at character {exc.pos}).", code="malformed_json"
        ) from None


def events_of(document: Any, max_events: int) -> list[Any]:
    """The list of raw events a document carries."""
    if isinstance(document, dict) and set(document) == {"events"}:
        document = document["events"]
        if not isinstance(document, list):
            raise Unprocessable("'events' must be an array of events.", code="wrong_type")
    raws = document if isinstance(document, list) else [document]
    if not raws:
        raise Unprocessable("the batch is empty; send at least one event.", code="empty_batch")
    if len(raws) > max_events:
        raise PayloadTooLarge(
            f"a batch holds at most {max_events} events, not {len(raws)}; split it.",
            code="too_many_events",
        )
    return raws


def offset_dict(offset: Offset) -> dict[str, Any]:
    return {**offset.to_dict(), "token": str(offset)}


class Publisher:
    """A gateway process's way into the log, shared by ``POST /v1/events`` and WebSocket
    ``publish``, with the state its limits keep: the subjects' rates and the store's room."""

    def __init__(
        self, settings: GatewaySettings, app: App, client: store.Client, metrics: Metrics
    ) -> None:
        self.app = app
        self.client = client
        self.metrics = metrics
        self.partitions = settings.store.log_partitions
        self.retention = settings.store.log_retention
        self.window = TimeWindow(
            max_ahead_ms=settings.event_time_max_ahead_seconds * 1000,
            max_age_ms=settings.event_time_max_age_days * 86_400_000,
        )
        self.rate = PublishRate(settings.publish_rate, settings.publish_burst)
        self.idempotency_seconds = settings.idempotency_seconds
        self.appender: Appender | KafkaAppender = (
            KafkaAppender.open(settings.store, app, client)
            if settings.store.kafka
            else Appender(
                client,
                self.partitions,
                self.retention,
                ack_replicas=settings.store.store_ack_replicas,
                budget=settings.append_retry_seconds,
            )
        )
        self.memory = StoreMemory(
            client, settings.store_full_percent, settings.store_memory_check_ms / 1000
        )

    async def publish(
        self, principal: Principal, raws: list[Any], idempotency_key: str | None = None
    ) -> list[Offset]:
        """Append ``raws`` as ``principal``, once per ``idempotency_key`` (one is made for this
        call when none is given, so that its own retries through a failover never append an
        event twice)."""
        try:
            idempotency = Idempotency.of(raws, idempotency_key, self.idempotency_seconds)
        except InvalidIdempotencyKey as exc:
            raise BadRequest(exc.message, code=exc.code) from None
        self.refuse_unpublishable(raws)
        try:
            events = self.app.validate_batch(raws, self.window)
        except InvalidEvent as exc:
            raise Unprocessable(
                exc.message, code=exc.code, index=exc.index, field=exc.field
            ) from None
        named: list[Any] = []
        for event in events:
            author = self.app.event_types[event.type].author
            named.append(author(event.payload) if author is not None else None)
        if principal.service:  # a backend publishes as the authors its events name
            shown = ", ".join(sorted({str(n) for n in named if n is not None})[:10]) or "no author"
            log.info("service %r publishes %d events as %s", principal.subject, len(events), shown)
        else:
            for i, name in enumerate(named):
                if name is not None and name != principal.subject:
                    raise Forbidden(
                        f"event {i}: you are signed in as {principal.subject!r} and may publish "
                        f"only as yourself, not as {name!r}.",
                        code="not_author",
                        index=i,
                    )
        try:
            await self.memory.check()
        except Unavailable:
            self.metrics.publishes_refused_store_full += 1
            raise
        # Taken last, right before the write: a batch refused for any other reason costs none.
        wait = self.rate.take(principal.subject, len(events))
        if wait:
            self.metrics.publishes_rate_limited += 1
            raise TooManyRequests(
                f"{principal.subject!r} may publish {self.rate.rate:g} events per second, "
                f"{self.rate.burst} at once; send these {len(events)} again in "
                f"{retry_after(wait)} s, or fewer sooner.",
                retry_after=retry_after(wait),
            )
        try:
            return await self.appender.append(events, idempotency)
        except IdempotencyKeyReused as exc:
            raise Unprocessable(exc.message, code=exc.code) from None
        except PartialAppend as exc:
            appended = [offset_dict(o) if o is not None else None for o in exc.appended]
            raise Unavailable(exc.message, code=exc.code, appended=appended) from None
        except (NotAcknowledged, LogUnavailable) as exc:
            raise Unavailable(exc.message, code=exc.code) from None
        except OutOfMemoryError:
            # The store's own refusal, before this gateway's next look at its memory: the
            # same answer, and the batch was not written (its MULTI was discarded).
            self.metrics.publishes_refused_store_full += 1
            self.memory.forget()
            raise store_full() from None
        except RedisError as exc:
            if not refuses_writes(exc):
                raise
            self.metrics.publishes_refused_store_full += 1
            raise await writes_refused(self.client) from None

    def close(self) -> None:
        if isinstance(self.appender, KafkaAppender):
            self.appender.close()

    def refuse_unpublishable(self, raws: list[Any]) -> None:
        """A declared table's row changes come from its database only (``liveviews.cdc``): a
        client's copy could contradict the table the views must equal."""
        for i, raw in enumerate(raws):
            name = raw.get("type") if isinstance(raw, dict) else None
            et = self.app.event_types.get(name) if isinstance(name, str) else None
            if et is not None and not et.publishable:
                raise Forbidden(
                    f"event {i}: {name!r} events come from the database's changes and cannot be "
                    "published; write the row to the database instead.",
                    code="not_publishable",
                    index=i,
                )
