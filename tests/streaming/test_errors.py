"""A failure's text in one line, as the console and dead letters give it."""

from __future__ import annotations

from liveviews.errors import failure_line

JVM_TRACE = """\
py4j.protocol.Py4JJavaError: An error occurred while calling o123.awaitTermination.
: org.apache.spark.sql.streaming.StreamingQueryException: Query profiles terminated
\tat org.apache.spark.util.SparkErrorUtils.tryWithResource(SparkErrorUtils.scala:42)
\tat org.apache.spark.sql.execution.streaming.StreamExecution.run(StreamExecution.scala:300)
Caused by: java.io.IOException: No space left on device
\tat java.base/java.io.FileOutputStream.writeBytes(Native Method)
\t... 12 more
"""

PYTHON_TRACE = """\
Traceback (most recent call last):
  File "/app/views.py", line 10, in count
    raise ValueError("bad row")
ValueError: bad row
"""


def test_a_jvm_failure_is_its_innermost_cause_not_a_frame() -> None:
    assert failure_line(JVM_TRACE) == "java.io.IOException: No space left on device"


def test_a_python_traceback_is_its_exception() -> None:
    assert failure_line(PYTHON_TRACE) == "ValueError: bad row"


def test_text_that_names_no_error_is_its_first_line() -> None:
    assert failure_line("\n  the store went away\nsecond\n") == "the store went away"
    assert failure_line("") == "unknown error"


def test_a_long_failure_is_cut_to_the_limit() -> None:
    line = failure_line("Error " + "x" * 1000, limit=50)
    assert len(line) == 50 and line.endswith("...")
