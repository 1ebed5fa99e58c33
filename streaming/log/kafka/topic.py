"""The log's Kafka topic: created on first use with the application's partition count, kept
forever, stamped by the broker's clock; a topic with another partition count is refused."""

from __future__ import annotations

import time
from typing import Any

from liveviews.errors import LiveviewsError, StoreMismatch
from liveviews.log.kafka.clients import kafka_config

LOG_TOPIC = "liveviews.log"
ADMIN_TIMEOUT_S = 30.0


class LogUnavailable(LiveviewsError):
    """The Kafka log did not answer, or did not acknowledge an append in time."""

    code = "log_unavailable"


def topic_config(replication: int) -> dict[str, str]:
    """The log is the source of truth: nothing is deleted by age or size, and each record is
    stamped with the broker's clock (the event's ingestion time). An append needs two replicas
    in sync where there are three."""
    return {
        "retention.ms": "-1",
        "retention.bytes": "-1",
        "cleanup.policy": "delete",
        "message.timestamp.type": "LogAppendTime",
        "min.insync.replicas": str(min(2, replication)),
    }


def wait_for_kafka(bootstrap: str, seconds: float) -> None:
    """Until as many brokers answer as ``bootstrap`` names (at most 3, as a topic's replicas),
    for up to ``seconds``: under the run commands the brokers start beside this process, and a
    topic created before they all run would have fewer replicas."""
    from confluent_kafka.admin import AdminClient

    wanted = min(3, len(bootstrap.split(",")))
    admin = AdminClient(kafka_config(bootstrap))
    deadline = time.monotonic() + seconds
    while True:
        try:
            if len(admin.list_topics(timeout=2).brokers) >= wanted:
                return
        except Exception:  # confluent_kafka.KafkaException: none answered yet
            pass
        if time.monotonic() > deadline:
            raise LogUnavailable(
                f"fewer than {wanted} Kafka brokers answered at {bootstrap} within {seconds:g} "
                "s; is the 'kafka' process running?"
            )
        time.sleep(0.5)


def ensure_log_topic(
    admin: Any, partitions: int, topic: str = LOG_TOPIC, *, compacted: bool = False
) -> None:
    """Create ``topic`` with ``partitions`` if it does not exist (replication factor the
    brokers', at most 3); refuse it with a sentence if it has another partition count, since an
    entity's events would move to another partition and lose their order."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import NewTopic

    have = _partitions(admin, topic)
    if have is None:
        brokers = len(admin.list_topics(timeout=ADMIN_TIMEOUT_S).brokers)
        replication = min(3, max(1, brokers))
        config = topic_config(replication)
        if compacted:  # a record per key is what is kept: the latest
            config["cleanup.policy"] = "compact"
        new = NewTopic(topic, partitions, replication, config=config)
        try:
            admin.create_topics([new])[topic].result(ADMIN_TIMEOUT_S)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise LogUnavailable(f"the Kafka log topic {topic!r} could not be created: "
                                     f"{exc.args[0].str()}") from None  # fmt: skip
        # The brokers learn of a new topic a moment after its creation is acknowledged.
        deadline = time.monotonic() + ADMIN_TIMEOUT_S
        while (have := _partitions(admin, topic)) is None and time.monotonic() < deadline:
            time.sleep(0.05)
    if have is None:
        raise LogUnavailable(f"the Kafka log topic {topic!r} was created but no broker knows it "
                             f"after {ADMIN_TIMEOUT_S:g} s; check the brokers' logs.")  # fmt: skip
    if have != partitions:
        raise StoreMismatch(
            f"the Kafka topic {topic!r} has {have} partitions and this process has "
            f"LV_LOG_PARTITIONS={partitions}. Set it to the topic's count, or use a new topic."
        )


def _partitions(admin: Any, topic: str) -> int | None:
    try:
        metadata = admin.list_topics(topic, timeout=ADMIN_TIMEOUT_S)
    except Exception as exc:  # confluent_kafka.KafkaException: the brokers did not answer
        raise LogUnavailable(f"the Kafka brokers did not answer: {exc}") from None
    found = metadata.topics.get(topic)
    if found is None or found.error is not None or not found.partitions:
        return None
    return len(found.partitions)
