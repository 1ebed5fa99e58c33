"""The writer of the log a process's settings name: the store's streams, or a Kafka log when
``LV_KAFKA`` is set. Every process that appends outside the gateway (the demos' writers) takes
its writer here, so that it writes where the pipelines read."""

from __future__ import annotations

from liveviews.app import App
from liveviews.log.eventlog import EventLog
from liveviews.log.writer import LogWriter
from liveviews.pipeline.settings import Settings
from liveviews.store.client import Client


def log_writer(settings: Settings, app: App, client: Client) -> LogWriter:
    """``client`` is the store's: the log's own on Redis Streams, the idempotency records'
    on Kafka."""
    if settings.kafka:
        from liveviews.log.kafka.append import KafkaEventLog

        return KafkaEventLog(settings.kafka, app, settings.log_partitions, client,
                             topic=settings.kafka_topic)  # fmt: skip
    return EventLog(client, app, settings.log_partitions, settings.log_retention)
