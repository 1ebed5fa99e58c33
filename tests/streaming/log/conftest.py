"""The Kafka log the Kafka tests of this folder append to: Chirp's events, on a topic of the
test's own on the session's broker."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
import redis

from demo.chirp import app as chirp
from liveviews.log.kafka.append import KafkaEventLog
from tests.support.kafkalog import PARTITIONS


@pytest.fixture()
def log(kafka_bootstrap: str, store: redis.Redis) -> Iterator[KafkaEventLog]:
    writer = KafkaEventLog(kafka_bootstrap, chirp, PARTITIONS, store,
                           topic=f"log-{uuid.uuid4().hex[:8]}")  # fmt: skip
    yield writer
    writer.close()
