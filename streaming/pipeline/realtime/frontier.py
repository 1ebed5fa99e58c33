"""The frontier of a query in Real-Time Mode, advanced as Spark reports each epoch done.

The writer applies row changes as they come and cannot tell which of the log's entries they
cover: Spark's report of an epoch comes after every writer of the epoch closed, and names the
offsets the epoch read to, so the frontier it then advances covers only changes written. Like
``liveviews.pipeline.progress``, the listener is Spark's Java interface implemented in Python,
and takes each report as Spark's JSON.
"""

from __future__ import annotations

import logging
import weakref
from typing import TYPE_CHECKING, Any

import orjson
from pyspark.java_gateway import ensure_callback_server_started
from pyspark.sql import SparkSession

if TYPE_CHECKING:
    from liveviews.pipeline.sink import ChangeTopicSink

log = logging.getLogger("liveviews.realtime")


class RealtimeFrontier:
    """A ``StreamingQueryListener`` that advances the frontier of each followed query."""

    def __init__(self) -> None:
        self.sinks: dict[str, ChangeTopicSink] = {}

    def follow(self, query_name: str, sink: ChangeTopicSink) -> None:
        self.sinks[query_name] = sink

    def advance(self, progress: dict[str, Any]) -> None:
        sink = self.sinks.get(progress.get("name") or "")
        sources = progress.get("sources") or []
        if sink is None or not sources or not sources[0].get("endOffset"):
            return
        end = sources[0]["endOffset"]
        if isinstance(end, str):
            end = orjson.loads(end)
        read_to = {int(p): str(entry) for p, entry in end.items()}
        sink.advance_frontier(progress["batchId"], read_to, progress.get("numInputRows", 0))

    # org.apache.spark.sql.streaming.PythonStreamingQueryListener, called on Spark's listener
    # thread through the py4j callback server.
    def onQueryStarted(self, event: Any) -> None:
        pass

    def onQueryProgress(self, event: Any) -> None:
        try:
            self.advance(orjson.loads(event.json())["progress"])
        except Exception:  # a store away longer than the sink waits: the next epoch catches up
            log.exception("could not advance a Real-Time Mode query's frontier")

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        pass

    class Java:
        implements = ["org.apache.spark.sql.streaming.PythonStreamingQueryListener"]


_frontiers: weakref.WeakKeyDictionary[SparkSession, RealtimeFrontier] = weakref.WeakKeyDictionary()


def realtime_frontier(spark: SparkSession) -> RealtimeFrontier:
    """The session's listener, registered with Spark once."""
    found = _frontiers.get(spark)
    if found is not None:
        return found
    found = RealtimeFrontier()
    gateway = spark.sparkContext._gateway
    assert gateway is not None
    ensure_callback_server_started(gateway)
    wrapper = gateway.jvm.org.apache.spark.sql.streaming.PythonStreamingQueryListenerWrapper(found)
    spark._jsparkSession.streams().addListener(wrapper)
    _frontiers[spark] = found
    return found
