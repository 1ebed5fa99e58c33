"""How far a micro-batch read the log, from the query's own offset log.

Before a micro-batch runs, Spark writes the source offsets it will read up to into the
query's checkpoint (the offset log, ``offsets/<batch id>``); a batch replayed after a crash
reads the same entry. The sink records these offsets as the pipeline's frontier.

Reading them here, rather than having the source emit a row per partition, keeps each
micro-batch to one scan of the log: a second branch of the query for those rows was a
second read task, queued behind the stateful tasks on a small machine. A plan that scans the
log more than once (a union or a join of event types) has an entry per scan, all of the one
stream of the log, so all the same.
"""

from __future__ import annotations

from typing import Any

import orjson
from pyspark.sql import SparkSession

QUERY_ID_PROPERTY = "sql.streaming.queryId"
"""The local property Spark sets on a query's stream thread, which ``foreachBatch`` runs on."""
UNREAD = "0-0"
"""The initial offset of a log partition: nothing read from it yet."""


class BatchEnds:
    """``ends(batch_id)`` from a query's ``foreachBatch`` function: the entry id each log
    partition was read to by the end of that batch (partitions not read yet are left out)."""

    def __init__(self, spark: SparkSession) -> None:
        self._context = spark.sparkContext
        # The session the queries were started from: the session foreachBatch passes along is
        # a clone whose query manager does not list them.
        self._queries: Any = spark._jsparkSession.streams()  # type: ignore[attr-defined]

    def __call__(self, batch_id: int) -> dict[int, str]:
        query_id = self._context.getLocalProperty(QUERY_ID_PROPERTY)
        query = self._queries.get(query_id) if query_id else None
        if query is None:
            raise RuntimeError(f"batch {batch_id} runs outside an active streaming query.")
        entry = query.streamingQuery().offsetLog().get(batch_id)
        if entry.isEmpty():
            raise RuntimeError(f"the offset log of query {query_id} has no batch {batch_id}.")
        # One entry per scan of the source: a union or a join of event types scans the one
        # stream of the log twice, to the same offsets (``liveviews.pipeline.plan``).
        offsets = entry.get().offsets()
        read = {offsets.apply(i).get().json() for i in range(offsets.size())}
        if len(read) != 1:
            raise RuntimeError(
                f"batch {batch_id} of query {query_id} read the log to {len(read)} different "
                "offsets; a pipeline reads only the events it is given."
            )
        return parse(read.pop())


def parse(offset_json: str) -> dict[int, str]:
    """The source's offset as positions per partition: the Redis Streams source's
    ``{"0": "1732170000000-0", ...}``, or Spark's Kafka source's ``{"<topic>": {"0": 42, ...}}``
    (the next offset to read, which is the position of the last record read)."""
    offsets: dict[str, Any] = orjson.loads(offset_json)
    found = kafka_positions(offsets)
    if found is not None:
        return found
    return {int(p): entry for p, entry in offsets.items() if entry != UNREAD}


def kafka_positions(offsets: dict[str, Any]) -> dict[int, str] | None:
    """The positions of Spark's Kafka source's offset, decoded; None for another source's."""
    if len(offsets) == 1 and isinstance(topic := next(iter(offsets.values())), dict):
        return {int(p): str(n) for p, n in topic.items() if n > 0}
    return None
