"""A pipeline's query, checked before it runs.

What Spark or Liveviews cannot run is refused when the pipeline starts, in one sentence that
names the pipeline and what to change: failing at the first micro-batch instead would set its
events aside as dead letters and start the pipeline again, in a loop, to fail the same way.
The sentence goes to the console; Spark's own text and the traceback go to the log file.

Several reads of the events are one read of the log: branches of the events DataFrame (a
union of event types, a join of two) are scans of one source, which Spark gives the same
offsets in each micro-batch (``liveviews.pipeline.offsetlog``). A second source, even of the
same log, would be read to other offsets, so a pipeline reads only the DataFrame it is given.
"""

from __future__ import annotations

import logging
import re
import time
from typing import TYPE_CHECKING, Any

from py4j.protocol import Py4JError, Py4JJavaError
from pyspark.errors import AnalysisException
from pyspark.errors.exceptions.captured import CapturedException

from liveviews.console import FILE_ONLY
from liveviews.errors import ConfigurationError
from liveviews.pipeline.source import SOURCE_NAME
from liveviews.pipeline.views import CHANGE_SCHEMA

if TYPE_CHECKING:
    from collections.abc import Callable

    from pyspark.sql import DataFrame
    from pyspark.sql.streaming import StreamingQuery

    from liveviews.app import Pipeline

log = logging.getLogger("liveviews.pipeline")

JVM_SOURCE_NAMES = ("io.liveviews.spark.LogSource", "liveviews-log-jvm")
"""How Spark names the Real-Time Mode source (liveviews.pipeline.realtime.jar.SOURCE_CLASS)."""
KAFKA_SOURCE_NAME = "kafka"
"""Spark's own Kafka source, for a Kafka log (liveviews.pipeline.kafkalog)."""

HINTS = {
    "only in Append output mode": (
        "declare the pipeline with output_mode='append' (Spark then emits each row once, when "
        "it is final)"
    ),
    "aggregations without watermark": (
        "declare the pipeline in update mode (the default), or group by a window of an event "
        "time that has a watermark (withWatermark), which append mode needs to know a group is "
        "final"
    ),
    "without a watermark in the join keys": (
        "put one watermark on the events before splitting them (withWatermark) and bound the "
        "join by time, as docs/VIEWS.md shows"
    ),
    "'correctness' issue": (
        "compute it with one aggregation (Spark refuses one over another's output in update "
        "mode), or keep the state in a state processor (docs/VIEWS.md)"
    ),
    "UNRESOLVED_COLUMN": "name a column the query has (payloads() gives each field its own)",
}
"""What to change, by a phrase of Spark's refusal, for the refusals people meet most."""
REALTIME_REFUSALS = (
    "OPERATOR_OR_SINK_NOT_IN_ALLOWLIST",
    "INPUT_STREAM_NOT_SUPPORTED",
    "REAL_TIME",
    "Real-Time Mode",
    "realtime",
)
"""Phrases of Spark's refusals of a plan in Real-Time Mode."""
REALTIME_PLANNING_S = 60
"""How long a query in Real-Time Mode may take to plan its first epoch, where Spark refuses
what the mode cannot run; past it, a later failure restarts it as any other would."""


class PipelineRefused(ConfigurationError):
    """A pipeline that cannot run as written; the message says why and what to change."""

    code = "pipeline_refused"


def refused(pipeline: str, why: str, cause: BaseException | None = None) -> PipelineRefused:
    """The error a refused pipeline stops the process with; ``cause``'s traceback goes to the
    log file only."""
    if cause is not None:
        log.error("pipeline %r refused", pipeline, exc_info=cause, extra=FILE_ONLY)
    return PipelineRefused(f"pipeline {pipeline!r} cannot run: {why}")


def spark_said(exc: BaseException) -> str:
    """Spark's refusal in a sentence and what to change: its first line, without the plan
    that follows it, nor the SQLSTATE."""
    message = getattr(exc, "getMessage", None)
    text = str(message() if callable(message) else exc).strip()
    first = (text.splitlines() or [""])[0].split(" SQLSTATE:")[0].rstrip(";. ")
    hint = next((h for phrase, h in HINTS.items() if phrase in text), None)
    said = f"Spark refuses its query: {first}."
    return f"{said} To run it, {hint}." if hint else said


def built(pipeline: Pipeline, events: DataFrame) -> DataFrame:
    """The pipeline's changes, in the columns the sink takes; refused with a sentence when its
    function fails, Spark cannot analyse what it returns, or it reads anything but ``events``."""
    try:
        rows = pipeline.build(events)
    except ConfigurationError as exc:
        raise refused(pipeline.name, exc.message, exc) from exc
    except AnalysisException as exc:
        raise refused(pipeline.name, spark_said(exc), exc) from exc
    except (Py4JError, OSError):
        raise  # the driver or the machine, not the pipeline: starting again may work
    except Exception as exc:  # noqa: BLE001 - the application's code: its error, in a sentence
        raise refused(
            pipeline.name, f"its function raised {type(exc).__name__}: {exc}.", exc
        ) from exc
    if not hasattr(rows, "schema") or not hasattr(rows, "isStreaming"):
        raise refused(
            pipeline.name,
            f"its function returned {type(rows).__name__}, not a DataFrame of view changes; "
            "return view_changes(...) or the rows of a state processor.",
        )
    _check_columns(pipeline.name, rows)
    _check_reads(pipeline.name, rows)
    return rows.select(*[f.name for f in CHANGE_SCHEMA.fields])


def started(pipeline: str, start: Callable[[], StreamingQuery]) -> StreamingQuery:
    """``start()``, with Spark's refusal of the query's plan (an output mode, an unsupported
    operation) as a refused pipeline."""
    try:
        return start()
    except AnalysisException as exc:
        raise refused(pipeline, spark_said(exc), exc) from exc


def started_realtime(
    pipeline: str, start: Callable[[], StreamingQuery], jobs: Callable[[str], list[int]]
) -> StreamingQuery:
    """``start()`` of a query in Real-Time Mode, returned once Spark runs its first epoch;
    Spark's refusal of an operator, a source or a sink the mode cannot run, which comes as it
    plans that epoch, is a refused pipeline that says how to run it. ``jobs``: Spark's jobs of
    a run of a query (its job group is the run's id)."""
    try:
        query = start()
    except (CapturedException, Py4JJavaError) as exc:
        raise _realtime_refusal(pipeline, exc) from exc
    deadline = time.monotonic() + REALTIME_PLANNING_S
    while time.monotonic() < deadline and not jobs(str(query.runId)):
        if not query.isActive:
            failure = query.exception()
            if failure is None:
                break
            raise _realtime_refusal(pipeline, failure) from failure
        time.sleep(0.05)
    return query


def _realtime_refusal(pipeline: str, exc: BaseException) -> BaseException:
    text = spark_text(exc)
    if not any(phrase in text for phrase in REALTIME_REFUSALS):
        if isinstance(exc, AnalysisException):
            return refused(pipeline, spark_said(exc), exc)
        return exc
    return refused(
        pipeline, f"Spark cannot run its query in Real-Time Mode: {_realtime_said(text)}", exc
    )


MICRO_BATCHES = "declare it without realtime=True, and it runs in micro-batches"


def _realtime_said(text: str) -> str:
    """Why, and what to change, for the refusals a declared view meets; Spark's own first
    line otherwise (never the bypass it offers: an allowlist turned off runs what it was not
    made for)."""
    operator = re.search(r"The operator\(s\): (\S+) is not", text)
    if operator:
        name = operator.group(1).rsplit(".", 1)[-1]
        what = "Python code per event" if "python" in operator.group(1).lower() else "an operator"
        return (f"its plan runs {what} ({name}), which that mode does not. To run it, "
                f"{MICRO_BATCHES}.")  # fmt: skip
    if "IDENTICAL_SOURCES_IN_UNION" in text:
        return ("it joins or unions two reads of the events, which that mode refuses. To run it, "
                "read the event types together (payloads(events, app, 'a', 'b'), or one table "
                f"with a condition on `type`), or {MICRO_BATCHES}.")  # fmt: skip
    interval = re.search(r"set to (\d+) ms\. This is less than the (\d+) ms minimum", text)
    if interval:
        return (f"its trigger_interval is {interval.group(1)} ms, and that mode checkpoints at "
                f"most every {interval.group(2)} ms. To run it, declare a trigger_interval of at "
                f"least {int(interval.group(2)) // 1000} s.")  # fmt: skip
    said = re.sub(r"^\[[A-Z_.]+\] ", "", _first_line(text)).split(" To bypass this check")[0]
    said = said.replace("Streaming real-time mode has the following limitation: ", "")
    return f"{said.rstrip('. ')}. To run it, {MICRO_BATCHES}."


def spark_text(exc: BaseException) -> str:
    """The message of a Spark error, from Python or from the JVM."""
    java = getattr(exc, "java_exception", None)
    if java is not None:
        return str(java.getMessage() or java.toString())
    message = getattr(exc, "getMessage", None)
    # PySpark's getMessage() is empty for an error that is not one of Spark's own classes.
    return (str(message()) if callable(message) else "") or str(exc)


def _first_line(text: str) -> str:
    return (text.strip().splitlines() or [""])[0].split(" SQLSTATE:")[0].rstrip(";. ")


def _check_columns(pipeline: str, rows: DataFrame) -> None:
    have = {f.name: f.dataType for f in rows.schema.fields}
    wanted = ", ".join(f.name for f in CHANGE_SCHEMA.fields)
    for f in CHANGE_SCHEMA.fields:
        found = have.get(f.name)
        if found is None:
            raise refused(
                pipeline,
                f"it returns no column {f.name!r}; a pipeline returns {wanted} "
                "(end it with view_changes(...)).",
            )
        if found != f.dataType:
            raise refused(
                pipeline,
                f"its column {f.name!r} is {found.simpleString()}, not "
                f"{f.dataType.simpleString()}; cast it (view_changes(...) does).",
            )


def _check_reads(pipeline: str, rows: DataFrame) -> None:
    """One streaming relation, the log's, however many times the plan scans it."""
    plan: Any = rows._jdf.queryExecution().analyzed()
    leaves = plan.collectLeaves()
    streams: list[Any] = []
    for i in range(leaves.size()):
        leaf = leaves.apply(i)
        if leaf.isStreaming() and not any(leaf.equals(s) for s in streams):
            streams.append(leaf)
    names = [_source_name(s) for s in streams]
    if not rows.isStreaming or not streams:
        raise refused(
            pipeline,
            "it does not read the events it is given; build its rows from that DataFrame.",
        )
    if len(streams) > 1 or names[0] not in (SOURCE_NAME, *JVM_SOURCE_NAMES, KAFKA_SOURCE_NAME):
        raise refused(
            pipeline,
            f"it reads {len(streams)} streams ({', '.join(names)}), not only the events it is "
            "given; build every branch of the query (each union, each side of a join) from "
            "that one DataFrame, so that each micro-batch reads the log once, to one offset.",
        )


def _source_name(relation: Any) -> str:
    try:
        return str(relation.sourceName())
    except Py4JError:  # a streaming relation of another kind (a file source, say)
        return str(relation.nodeName())
