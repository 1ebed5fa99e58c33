"""A Kafka log as the pipeline's stream: Spark's own Kafka source, its records as the rows the
Redis Streams source gives (``liveviews.pipeline.views.EVENT_SCHEMA``).

Spark's Kafka source keeps its offsets in the query's checkpoint as the next offset to read per
partition (``{"<topic>": {"0": 42, ...}}``): exactly the log's positions on Kafka (PROTOCOL.md,
section 4), so a batch's end in the offset log is the pipeline's frontier as it is
(``liveviews.pipeline.offsetlog``). It reads committed records only (``read_committed``): no
record of a batch whose Kafka transaction was aborted ever reaches a view
(``liveviews.log.kafka.append``). Unlike the store's source, it does not keep a transaction's
events in one micro-batch: the ``maxOffsetsPerTrigger`` cut, or a commit marker one partition
has and another has not yet, can put them in two.

A record is read as ``liveviews.log.kafka.records`` writes it: its key the event's partition
key, its value the payload, the event's ``type`` and ``time`` in headers, and the broker's
timestamp the ingestion time. ``position`` (the offset after the record) is its ``offset``
column, so views order a partition's events by it as they order entry ids.
"""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from liveviews.log.kafka.broker import SPARK_POM, libs_path
from liveviews.log.kafka.records import HEADER_TIME, HEADER_TYPE
from liveviews.log.kafka.topic import LOG_TOPIC
from liveviews.pipeline.kafkascreen import RAW_COLUMNS, screening
from liveviews.pipeline.source import ScreenSpec
from liveviews.pipeline.views import EVENT_SCHEMA


def connector_jars() -> list[Path]:
    """Spark's Kafka source and what it needs, once fetched (``scripts/setup.sh``)."""
    folder = libs_path(SPARK_POM)
    return sorted(folder.glob("*.jar")) if (folder / ".complete").is_file() else []


def spark_conf(jars: list[Path]) -> dict[str, str]:
    """``spark.jars`` with the connector: loaded by Spark's own class loader, in the driver and,
    on a cluster, shipped to the executors."""
    return {"spark.jars": ",".join(str(j) for j in jars)} if jars else {}


def _header(name: str) -> F.Column:
    # get, not [0]: a record without the header (another producer's) is null there, which the
    # screen turns into a dead letter, where [0] would fail the query under ANSI SQL.
    return F.get(F.filter("headers", lambda h: h["key"] == F.lit(name)), 0)["value"]


def read_kafka_log(
    spark: SparkSession,
    bootstrap: str,
    max_events: int,
    topic: str = LOG_TOPIC,
    screen: tuple[str, int, ScreenSpec] | None = None,
    rate_limited: bool = True,
) -> DataFrame:
    """The Kafka log ``topic`` as a stream of ``EVENT_SCHEMA`` rows, at most ``max_events`` per
    micro-batch (unless not ``rate_limited``: an epoch of Real-Time Mode reads what comes until
    its time is up), from its first record. With ``screen`` (the store's URL, the log's
    partition count, the pipeline's ``ScreenSpec``), without the records the pipeline sets
    aside (``liveviews.pipeline.kafkascreen``)."""
    reader = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("includeHeaders", "true")
        .option("kafka.isolation.level", "read_committed")
    )
    if rate_limited:
        reader = reader.option("maxOffsetsPerTrigger", str(max_events))
    records = reader.load()
    columns = {
        "partition": F.col("partition"),
        "offset": (F.col("offset") + 1).cast("string"),
        "type": _header(HEADER_TYPE),
        "key": F.col("key"),
        "payload": F.col("value"),
        "time": _header(HEADER_TIME),
        "ingest_time_ms": F.unix_millis(F.col("timestamp")),
    }
    if screen is not None:
        url, partitions, spec = screen
        raw = records.select(*[columns[c].alias(c) for c in RAW_COLUMNS])
        return raw.mapInArrow(screening(url, partitions, spec), EVENT_SCHEMA)
    columns |= {"type": columns["type"].cast("string"), "key": columns["key"].cast("string"),
                "payload": columns["payload"].cast("string"),
                "event_time_ms": columns["time"].cast("string").try_cast("long")}  # fmt: skip
    rows = records.select(*[columns[f.name].alias(f.name) for f in EVENT_SCHEMA.fields])
    # Unscreened, a record without the event's fields, or whose time is not a number, is left
    # out rather than failing the query (what the store's JVM source does in Real-Time Mode).
    return rows.where(
        F.col("type").isNotNull() & F.col("key").isNotNull() & F.col("payload").isNotNull()
        & F.col("event_time_ms").isNotNull()
    )  # fmt: skip
