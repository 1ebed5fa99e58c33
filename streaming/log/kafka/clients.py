"""The settings every Kafka client of Liveviews starts from: the brokers, and librdkafka's own
log lines sent to Python's logging instead of the process's stderr.

librdkafka writes a line for each state it retries through on its own (a transaction
coordinator still loading, a broker restarting, a connection refused while a node is down);
on the console, under the run commands, they drowned what the processes say. They go to the
``liveviews.kafka`` logger at debug level, so to each process's log file only (or to the
console with ``LV_LOG_LEVEL=debug``); only its critical lines stay errors. What fails for good
surfaces as the client call's error, which the caller turns into a sentence.
"""

from __future__ import annotations

import logging
from typing import Any

_log = logging.getLogger("liveviews.kafka")


class _Librdkafka:
    """What confluent-kafka calls ``logger.log(level, fmt, *args)`` on (its ``logger``)."""

    def log(self, level: int, msg: str, *args: Any) -> None:
        _log.log(logging.ERROR if level >= logging.CRITICAL else logging.DEBUG, msg, *args)


LIBRDKAFKA = _Librdkafka()


def kafka_config(bootstrap: str, **extra: Any) -> dict[str, Any]:
    """A client's configuration: ``bootstrap``, the log lines above, and ``extra`` (librdkafka's
    own property names)."""
    return {"bootstrap.servers": bootstrap, "logger": LIBRDKAFKA, **extra}


def produce(producer: Any, topic: str, value: bytes, key: bytes, partition: int, headers: Any,
            on_delivery: Any = None, *, wait_when_full: bool) -> None:  # fmt: skip
    """Queues one record on ``producer``. A full queue (``BufferError``) is the caller's choice:
    waited out by a writer that must not stop halfway (CDC's snapshot), raised by one that can
    give up a batch and answer so (the gateway)."""
    while True:
        try:
            producer.produce(topic, value, key, partition=partition, headers=headers,
                             on_delivery=on_delivery)  # fmt: skip
            return
        except BufferError:
            if not wait_when_full:
                raise
            producer.poll(0.1)
