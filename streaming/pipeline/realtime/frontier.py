"""The frontier of a query in Real-Time Mode, advanced as Spark reports each epoch done.

The writer applies row changes as they come and cannot tell which of the log's entries they
cover: Spark's report of an epoch comes after every writer of the epoch closed, and names the
offsets the epoch read to, so the frontier it then advances covers only changes written. Like
``liveviews.pipeline.progress``'s, the listener takes each report as Spark's JSON.
"""

from __future__ import annotations

import logging
import weakref
from typing import TYPE_CHECKING, Any

import orjson
from pyspark.sql import SparkSession

from liveviews.pipeline.offsetlog import kafka_positions
from liveviews.pipeline.progress import JsonListener, listen

if TYPE_CHECKING:
    from liveviews.pipeline.sink import ChangeTopicSink

log = logging.getLogger("liveviews.realtime")


class RealtimeFrontier(JsonListener):
    """Advances the frontier of each followed query as Spark reports its epochs."""

    def __init__(self) -> None:
        self.sinks: dict[str, ChangeTopicSink] = {}

    def follow(self, query_name: str, sink: ChangeTopicSink) -> None:
        self.sinks[query_name] = sink

    def progress(self, progress: dict[str, Any]) -> None:
        try:
            self.advance(progress)
        except Exception:  # a store away longer than the sink waits: the next epoch catches up
            log.exception("could not advance a Real-Time Mode query's frontier")

    def advance(self, progress: dict[str, Any]) -> None:
        sink = self.sinks.get(progress.get("name") or "")
        sources = progress.get("sources") or []
        if sink is None or not sources or not sources[0].get("endOffset"):
            return
        end = sources[0]["endOffset"]
        if isinstance(end, str):
            end = orjson.loads(end)
        read_to = kafka_positions(end)
        if read_to is None:  # the store's JVM source: every partition, read or not
            read_to = {int(p): str(entry) for p, entry in end.items()}
        sink.advance_frontier(progress["batchId"], read_to, progress.get("numInputRows", 0))


_frontiers: weakref.WeakKeyDictionary[SparkSession, RealtimeFrontier] = weakref.WeakKeyDictionary()


def realtime_frontier(spark: SparkSession) -> RealtimeFrontier:
    """The session's listener, registered with Spark once."""
    found = _frontiers.get(spark)
    if found is None:
        found = _frontiers[spark] = RealtimeFrontier()
        listen(spark, found)
    return found
