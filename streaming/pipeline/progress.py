"""Each micro-batch's figures, appended to ``lv:pipeline:progress`` for operators and benchmarks.

The recorder implements Spark's Java listener interface itself and takes each progress event
as the JSON Spark renders for it: one call back into the JVM per micro-batch. PySpark's own
``StreamingQueryListener`` first copies every field of the event into Python objects, a py4j
round trip per field and per map entry (~80 per batch); on the reference machine that kept
Spark's listener thread busy for ~30% of a core at 100 events/s, beside the queries it reports
on (docs/PERFORMANCE.md).
"""

from __future__ import annotations

import contextlib
import weakref
from typing import Any

import orjson
import redis
from pyspark.java_gateway import ensure_callback_server_started
from pyspark.sql import SparkSession

from liveviews.store.client import Client

PIPELINE_PROGRESS_STREAM = "lv:pipeline:progress"
PIPELINE_PROGRESS_RETENTION = 10_000


class JsonListener:
    """A ``StreamingQueryListener`` on the JVM's side of py4j that takes each progress report as
    Spark's JSON (``progress``); registered with ``listen``."""

    def progress(self, progress: dict[str, Any]) -> None:
        raise NotImplementedError

    # org.apache.spark.sql.streaming.PythonStreamingQueryListener, called on Spark's listener
    # thread through the py4j callback server.
    def onQueryStarted(self, event: Any) -> None:
        pass

    def onQueryProgress(self, event: Any) -> None:
        self.progress(orjson.loads(event.json())["progress"])

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        pass

    class Java:
        implements = ["org.apache.spark.sql.streaming.PythonStreamingQueryListener"]


def listen(spark: SparkSession, listener: JsonListener) -> None:
    """Registers ``listener`` with the session's queries."""
    gateway = spark.sparkContext._gateway
    assert gateway is not None
    ensure_callback_server_started(gateway)
    jvm = gateway.jvm
    wrapper = jvm.org.apache.spark.sql.streaming.PythonStreamingQueryListenerWrapper(listener)
    spark._jsparkSession.streams().addListener(wrapper)


class ProgressRecorder(JsonListener):
    """Which query, which batch, how many events, and where its time went (``durationMs``)."""

    def __init__(self, client: Client) -> None:
        self.client = client

    def progress(self, progress: dict[str, Any]) -> None:
        with contextlib.suppress(redis.RedisError):
            self.client.xadd(
                PIPELINE_PROGRESS_STREAM,
                {"query": progress.get("name") or "", "batch": progress["batchId"],
                 "events": progress.get("numInputRows", 0),
                 "duration_ms": orjson.dumps(progress.get("durationMs", {}))},
                maxlen=PIPELINE_PROGRESS_RETENTION,
                approximate=True,
            )  # fmt: skip


_recorders: weakref.WeakKeyDictionary[SparkSession, ProgressRecorder] = weakref.WeakKeyDictionary()


def record_progress(spark: SparkSession, client: Client) -> ProgressRecorder:
    """Registers the session's recorder once, writing through ``client`` (the latest given)."""
    recorder = _recorders.get(spark)
    if recorder is not None:
        recorder.client = client
        return recorder
    recorder = ProgressRecorder(client)
    listen(spark, recorder)
    _recorders[spark] = recorder
    return recorder
