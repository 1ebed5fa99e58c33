"""The last line of defence: a micro-batch that failed in a view's code is set aside whole.

Views that wrap their processors with ``liveviews.pipeline.isolation.isolated`` set aside just the
events they raise on. Code that cannot name its event (a UDF, a processor that is not
isolated, a sink that refuses the batch's rows) fails the whole query instead. Here the
driver sees that failure, finds the batch Spark was running (the newest batch of the offset
log without a commit), records every entry of it as a dead letter (``STAGE_BATCH``), and
starts the query again: the batch is replayed over the same offsets, the source leaves the
set-aside entries out, and the pipeline goes on. The decision is recorded before the replay,
so the batch's outcome is the same whenever it runs again.

Failures of the infrastructure (the store unreachable for longer than the source and sink
wait, the state store or the JVM gone) are not the events' fault: they end the process, and
the pipeline resumes where it was when started again. A batch that fails again once its
events are set aside fails for another reason, and ends the process too.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

from pyspark.sql.streaming import StreamingQuery

from liveviews.errors import failure_line
from liveviews.log import deadletters
from liveviews.pipeline.offsetlog import UNREAD, parse
from liveviews.pipeline.settings import Settings
from liveviews.pipeline.source import READ_CHUNK
from liveviews.store.client import Client

log = logging.getLogger("liveviews.recovery")

VIEW_FAILURES = ("PythonException", "PYTHON_EXCEPTION", "Python Proxy", "PYTHON_UDF")
"""How Spark reports an exception raised by Python code: in a worker, or in foreachBatch."""
INFRASTRUCTURE_FAILURES = (
    "redis.exceptions.ConnectionError",
    "redis.exceptions.TimeoutError",
    "redis.exceptions.BusyLoadingError",
    "redis.exceptions.Cluster",  # ClusterError, ClusterDownError: a store cluster failing over
    "redis.exceptions.MovedError",
    "redis.exceptions.TryAgainError",
    "NotReplicated",
    "ConnectionRefusedError",
    "StateFailure",
    "Py4JError",
    "Py4JNetworkError",
    "OutOfMemoryError",
    "MemoryError",
    "No space left on device",
    # The store refusing writes for its own reasons: too few replicas, or a guard's switch
    # before its disk fills (liveviews.store.diskguard); a disk it cannot write; a replica.
    "NOREPLICAS",
    "MISCONF",
    "READONLY",
)


def is_view_failure(failure: str) -> bool:
    return any(m in failure for m in VIEW_FAILURES) and not any(
        m in failure for m in INFRASTRUCTURE_FAILURES
    )


def failed_batch(query: Any) -> tuple[int, dict[int, str], dict[int, str]] | None:
    """(batch id, where it starts, where it ends) of the batch the query was running when it
    failed; None when every planned batch had committed."""
    execution = query._jsq.streamingQuery()
    latest = execution.offsetLog().getLatest()
    if latest.isEmpty():
        return None
    batch_id = int(latest.get()._1())
    committed = execution.commitLog().getLatest()
    if not committed.isEmpty() and int(committed.get()._1()) >= batch_id:
        return None
    end = parse(latest.get()._2().offsets().apply(0).get().json())
    start: dict[int, str] = {}
    if batch_id > 0:
        before = execution.offsetLog().get(batch_id - 1)
        if not before.isEmpty():
            start = parse(before.get().offsets().apply(0).get().json())
    return batch_id, start, end


Entries = Callable[[int, str, str], Iterator[list[tuple[str, dict[bytes, bytes]]]]]
"""A partition's log entries after a position up to another (inclusive), in chunks of
(entry id or position, fields)."""


def store_entries(client: Client) -> Entries:
    """The entries of the store's log (Redis Streams)."""
    from liveviews.log.events import log_stream

    def read(p: int, start: str, last: str) -> Iterator[list[tuple[str, dict[bytes, bytes]]]]:
        cursor = start
        while True:
            low = "-" if cursor == UNREAD else f"({cursor}"
            entries: Any = client.xrange(log_stream(p), min=low, max=last, count=READ_CHUNK)
            yield [(entry_id.decode(), fields) for entry_id, fields in entries]
            if len(entries) < READ_CHUNK:
                return
            cursor = entries[-1][0].decode()

    return read


def kafka_entries(bootstrap: str, topic: str) -> Entries:
    """The records of a Kafka log (``liveviews.log.kafka.entries``)."""
    from liveviews.log.kafka.entries import read_range

    def read(p: int, start: str, last: str) -> Iterator[list[tuple[str, dict[bytes, bytes]]]]:
        return read_range(bootstrap, topic, p, 0 if start == UNREAD else int(start), int(last))

    return read


def log_entries(settings: Settings, client: Client) -> Entries:
    """The entries of the log ``settings`` name."""
    if settings.kafka:
        return kafka_entries(settings.kafka, settings.kafka_topic)
    return store_entries(client)


def set_aside(
    client: Client,
    pipeline: str,
    batch_id: int,
    start: dict[int, str],
    end: dict[int, str],
    failure: str,
    entries: Entries | None = None,
) -> int:
    """Record every entry of the batch not set aside yet; how many were."""
    read = entries or store_entries(client)
    already = deadletters.quarantined(client, pipeline)
    reason = (
        f"set aside with its micro-batch {batch_id}, which failed: {failure_line(failure, 500)}"
    )
    count = 0
    for p, last in sorted(end.items()):
        for chunk in read(p, start.get(p, UNREAD), last):
            letters = [
                deadletters.letter(pipeline, offset, deadletters.STAGE_BATCH, reason,
                                   fields=fields, batch=batch_id, trace=failure)
                for entry_id, fields in chunk
                if (offset := f"{p}:{entry_id}") not in already
            ]  # fmt: skip
            deadletters.record(client, letters)
            count += len(letters)
    return count


def stopped_without_failing(queries: dict[str, StreamingQuery]) -> bool:
    """True when a query has stopped and none stopped by failing, as queries stop when Spark
    shuts down. A query that failed after ``Recovery.check`` looked is the next check's to judge:
    taken for a shutdown, the pipeline would exit 0, which its supervisor takes as final."""
    stopped = [q for q in queries.values() if not q.isActive]
    return bool(stopped) and all(q.exception() is None for q in stopped)


class Recovery:
    """Decides, for each failed query, whether to set its batch aside and start it again."""

    def __init__(self, client: Client, entries: Entries | None = None) -> None:
        self.client = client
        self.entries = entries or store_entries(client)
        self.recovered: dict[str, int] = {}
        """The batch last set aside, per pipeline."""

    def check(
        self, queries: dict[str, StreamingQuery], restart: Callable[[str], StreamingQuery]
    ) -> tuple[str, str] | None:
        """Starts again (``restart``) each failed query of ``queries`` (by pipeline version)
        whose batch could be set aside; (query name, failure) of one that cannot go on, if any."""
        for pipeline, query in list(queries.items()):
            if query.isActive:
                continue
            failure = query.exception()
            if failure is None:
                continue  # stopped on purpose
            text = str(failure)
            if not self.set_aside_failed_batch(pipeline, query, text):
                return query.name, text
            queries[pipeline] = restart(pipeline)
        return None

    def set_aside_failed_batch(self, pipeline: str, query: Any, failure: str) -> bool:
        """True when the query can start again: its failed batch is now set aside."""
        if not is_view_failure(failure):
            return False
        found = failed_batch(query)
        if found is None:
            return False
        batch_id, start, end = found
        if self.recovered.get(pipeline) == batch_id:
            log.error("pipeline %r failed again on batch %d with its events set aside",
                      pipeline, batch_id)  # fmt: skip
            return False
        count = set_aside(self.client, pipeline, batch_id, start, end, failure, self.entries)
        self.recovered[pipeline] = batch_id
        log.error("pipeline %r: batch %d failed in the view's code; its %d events are dead"
                  " letters now (liveviews deadletters list); starting again",
                  pipeline, batch_id, count)  # fmt: skip
        return True
