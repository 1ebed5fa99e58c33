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
from typing import TYPE_CHECKING, Any

from py4j.protocol import Py4JError
from pyspark.errors import AnalysisException

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
    if len(streams) > 1 or names[0] != SOURCE_NAME:
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
