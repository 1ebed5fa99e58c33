"""The log behind one interface: what every writer of events offers, whichever log holds them
(Redis Streams, ``liveviews.log.eventlog``; Apache Kafka, ``liveviews.log.kafka.append``)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from typing import Any

from liveviews.app import App
from liveviews.log.append import Idempotency
from liveviews.log.events import Event, Offset


class LogWriter(ABC):
    """Appends an application's events: validated first, then each batch whole or not at all
    (a store cluster aside: ``PartialAppend``), once per idempotency key."""

    app: App

    def append(self, raw: Any, idempotency_key: str | None = None) -> Offset:
        return self.append_batch([raw], idempotency_key)[0]

    def append_batch(self, raws: Iterable[Any], idempotency_key: str | None = None) -> list[Offset]:
        """Validate and append ``raws``. Called again with the same ``idempotency_key`` and
        events, it returns the same offsets and appends nothing twice (for 24 hours); without
        a key, one is made for this call, which covers its own retries."""
        raws = list(raws)
        events = self.app.validate_batch(raws)
        return self.append_validated(events, Idempotency.of(raws, idempotency_key))

    @abstractmethod
    def append_validated(
        self, events: Sequence[Event], idempotency: Idempotency | None = None
    ) -> list[Offset]:
        """Append events already validated, under ``idempotency`` (a key made for them if
        None); their offsets, in order."""

    @abstractmethod
    def empty(self) -> bool:
        """Whether the log holds no event yet (a demo seeds one that does not)."""

    def close(self) -> None:  # noqa: B027 - most writers hold nothing of their own
        """Release what the writer holds (a Kafka producer's connections)."""
