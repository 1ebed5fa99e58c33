"""The console of each process: our lines readable, the libraries' routine lines in a file."""

from __future__ import annotations

import io
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from liveviews import console
from liveviews.errors import ConfigurationError
from liveviews.pipeline.settings import Settings

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def logging_restored(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test sets the process's logging up; the next finds it as it was."""
    monkeypatch.delenv("HONCHO_PROCESS_NAME", raising=False)
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    levels = {name: logging.getLogger(name).level for name in console.CHATTER}
    yield
    for handler in root.handlers:
        if handler not in handlers:
            root.removeHandler(handler)
            handler.close()
    root.setLevel(level)
    for name, lib_level in levels.items():
        logging.getLogger(name).setLevel(lib_level)
    logging.captureWarnings(False)


def set_up(tmp_path: Path, level: str = "info") -> tuple[io.StringIO, Path]:
    settings = Settings.from_env({"LV_DATA_DIR": str(tmp_path), "LV_LOG_LEVEL": level})
    shown = io.StringIO()
    path = console.setup("pipeline", settings, stream=shown)
    assert path == tmp_path / "logs" / "pipeline.log"
    return shown, path


def test_a_line_of_ours_reads_as_time_process_and_sentence(tmp_path: Path) -> None:
    shown, path = set_up(tmp_path)
    logging.getLogger("liveviews.pipeline").info("ready: 2 queries running")
    logging.getLogger("liveviews.pipeline").warning("the store is slow")
    lines = shown.getvalue().splitlines()
    assert [line[9:] for line in lines] == [
        "pipeline  ready: 2 queries running",
        "pipeline  warning: the store is slow",
    ]
    assert lines[0][:8].count(":") == 2  # HH:MM:SS
    assert "INFO liveviews.pipeline: ready: 2 queries running" in path.read_text()


def test_under_honcho_the_line_is_the_sentence_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """honcho starts each line with the time and the process's name already."""
    monkeypatch.setenv("HONCHO_PROCESS_NAME", "pipeline.1")
    shown, _ = set_up(tmp_path)
    logging.getLogger("liveviews.pipeline").info("ready: 2 queries running")
    assert shown.getvalue() == "ready: 2 queries running\n"


def test_py4j_chatter_stays_off_the_console_and_its_errors_do_not(tmp_path: Path) -> None:
    shown, path = set_up(tmp_path)
    py4j = logging.getLogger("py4j.clientserver")
    py4j.info("Received command c on object id p0")
    py4j.warning("a py4j warning")
    py4j.error("the Java side is gone")
    assert shown.getvalue().endswith(" pipeline  error: the Java side is gone\n")
    assert len(shown.getvalue().splitlines()) == 1
    logged = path.read_text()
    assert "Received command" not in logged
    assert "WARNING py4j.clientserver: a py4j warning" in logged
    assert "ERROR py4j.clientserver: the Java side is gone" in logged


def test_debug_shows_everything_with_the_loggers_name(tmp_path: Path) -> None:
    shown, path = set_up(tmp_path, "debug")
    logging.getLogger("py4j.clientserver").debug("Command to send: c")
    logging.getLogger("liveviews.pipeline").info("ready")
    assert [line[9:] for line in shown.getvalue().splitlines()] == [
        "pipeline  debug py4j.clientserver: Command to send: c",
        "pipeline  info liveviews.pipeline: ready",
    ]
    assert "DEBUG py4j.clientserver: Command to send: c" in path.read_text()


def test_warning_leaves_the_info_lines_to_the_file(tmp_path: Path) -> None:
    shown, path = set_up(tmp_path, "WARNING")
    logging.getLogger("liveviews.pipeline").info("ready")
    logging.getLogger("liveviews.pipeline").warning("slow")
    assert shown.getvalue().endswith(" pipeline  warning: slow\n")
    assert len(shown.getvalue().splitlines()) == 1
    assert "INFO liveviews.pipeline: ready" in path.read_text()


def test_a_second_setup_replaces_the_first(tmp_path: Path) -> None:
    set_up(tmp_path)
    shown, _ = set_up(tmp_path)
    logging.getLogger("liveviews.pipeline").info("once")
    assert len(shown.getvalue().splitlines()) == 1
    names = [h.get_name() for h in logging.getLogger().handlers]
    assert names.count("liveviews.console") == names.count("liveviews.file") == 1


def test_a_bad_log_level_is_refused_with_a_sentence() -> None:
    with pytest.raises(ConfigurationError, match="LV_LOG_LEVEL must be debug, info, warning or"):
        Settings.from_env({"LV_LOG_LEVEL": "loud"})


def test_a_process_started_with_a_bad_log_level_says_what_to_change(tmp_path: Path) -> None:
    env = {"LV_LOG_LEVEL": "verbose", "LV_DATA_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"}
    proc = subprocess.run(
        [sys.executable, "-m", "demo.chirp"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 2
    assert "LV_LOG_LEVEL must be debug, info, warning or error, not 'verbose'" in proc.stderr


def test_py4j_lines_through_the_root_logger_are_the_librarys_too(tmp_path: Path) -> None:
    """py4j reports a retried call with ``logging.info`` on the root logger."""
    shown, path = set_up(tmp_path)
    record = logging.LogRecord(
        "root", logging.INFO, f"{os.sep}site-packages{os.sep}py4j{os.sep}java_gateway.py",
        1056, "Exception while sending command.", None, None,
    )  # fmt: skip
    logging.getLogger().handle(record)
    assert shown.getvalue() == ""
    assert "INFO root: Exception while sending command." in path.read_text()


def test_once_stopping_the_libraries_errors_go_to_the_file_only(tmp_path: Path) -> None:
    shown, path = set_up(tmp_path)
    console.stopping()
    logging.getLogger("py4j.clientserver").error("Answer from Java side is empty")
    logging.getLogger("liveviews.pipeline").error("a failure of ours")
    assert shown.getvalue().endswith(" pipeline  error: a failure of ours\n")
    assert len(shown.getvalue().splitlines()) == 1
    assert "Answer from Java side is empty" in path.read_text()


def test_a_batch_cancelled_by_its_query_s_stop_stays_off_the_console(tmp_path: Path) -> None:
    """A switch of versions stops the replaced query mid-batch; py4j reports the cancelled
    job with a Java traceback, which belongs in the file, not on an operator's console."""
    shown, path = set_up(tmp_path)
    py4j = logging.getLogger("py4j.clientserver")
    cause = RuntimeError(
        "org.apache.spark.SparkException: [SPARK_JOB_CANCELLED] Job 2733 cancelled Query"
        " liveviews.profiles [id = ea6d8874] was stopped SQLSTATE: XXKDA"
    )  # fmt: skip
    try:
        raise RuntimeError("An error occurred while calling o58472.getResult.") from cause
    except RuntimeError:
        py4j.exception(
            "There was an exception while executing the Python Proxy on the Python Side."
        )
    try:
        raise RuntimeError(
            "[SPARK_JOB_CANCELLED] Job 7 cancelled because SparkContext was shut down"
        )
    except RuntimeError:
        py4j.exception("another cancelled job")
    assert shown.getvalue().endswith(  # not a stop: shown, in one line
        " pipeline  error: another cancelled job (RuntimeError: [SPARK_JOB_CANCELLED] Job 7"
        f" cancelled because SparkContext was shut down; the traceback is in {path})\n"
    )
    assert "Python Proxy" not in shown.getvalue() and "Job 2733" not in shown.getvalue()
    logged = path.read_text()
    assert "ERROR py4j.clientserver: There was an exception while executing" in logged
    assert "[SPARK_JOB_CANCELLED] Job 2733" in logged


JAVA_FAILURE = """An error occurred while calling o642.getResult.
: org.apache.spark.SparkException: Exception thrown in awaitResult:
\tat org.apache.spark.util.SparkThreadUtils$.awaitResult(SparkThreadUtils.scala:56)
\tat org.apache.spark.security.SocketAuthServer.getResult(SocketAuthServer.scala:98)
Caused by: org.apache.spark.SparkException: [CANNOT_WRITE_STATE_STORE.CANNOT_COMMIT] Error writing
\tat org.apache.spark.sql.errors.QueryExecutionErrors$.failedToCommitStateFileError(Errors.scala:1)
Caused by: java.io.IOException: No space left on device
\tat java.base/java.io.FileOutputStream.writeBytes(Native Method)
\t... 67 more
"""


def test_a_traceback_reaches_the_file_and_the_console_a_line(tmp_path: Path) -> None:
    """py4j reports a micro-batch that failed in the JVM with Python's traceback and the JVM's
    stack in its text, ~90 lines; the console shows what failed and where the rest is."""
    shown, path = set_up(tmp_path)
    py4j = logging.getLogger("py4j.clientserver")
    try:
        raise RuntimeError(JAVA_FAILURE)
    except RuntimeError:
        py4j.exception(
            "There was an exception while executing the Python Proxy on the Python Side."
        )
    try:
        raise KeyError("user")
    except KeyError:
        logging.getLogger("liveviews.pipeline").exception("a view failed")
    assert [line[9:] for line in shown.getvalue().splitlines()] == [
        "pipeline  error: There was an exception while executing the Python Proxy on the Python"
        " Side. (java.io.IOException: No space left on device; the traceback is in"
        f" {path})",
        f"pipeline  error: a view failed (KeyError: 'user'; the traceback is in {path})",
    ]
    logged = path.read_text()
    assert "Traceback (most recent call last)" in logged and "FileOutputStream.writeBytes" in logged
    assert 'raise KeyError("user")' in logged


def test_a_failure_whose_text_cannot_be_had_is_still_a_line(tmp_path: Path) -> None:
    """py4j asks the JVM for its error's text; with the JVM gone, that asking fails too."""

    class Unreadable(Exception):
        def __str__(self) -> str:
            raise ConnectionError("Answer from Java side is empty")

    assert console.exception_line(Unreadable()) == "Unreadable"
    assert console.exception_line(ValueError("x" * 400)).endswith("...")
    assert len(console.exception_line(ValueError("x" * 400))) == 300
