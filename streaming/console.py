"""The console of each Liveviews process: the lines a person reads, and a file for the rest.

The console shows what a person running the system needs: each process's start, its
readiness, warnings and errors, one line each (``12:00:01 pipeline  ready: 2 queries running``).
The process's log file under the data directory (``data/logs/pipeline.log``) keeps those lines
too, and the libraries' warnings (py4j's, uvicorn's, Python's own), of which the console shows
only errors; their routine lines below that (py4j's every ten seconds, uvicorn's for each
WebSocket) are dropped. ``LV_LOG_LEVEL=debug`` keeps and shows everything, down to the
libraries' debug lines; ``warning`` and ``error`` show only what is that serious.
A traceback goes to the file only: the console's line says what failed (for a JVM error, its
innermost cause) and where the traceback is.
"""

from __future__ import annotations

import logging
import logging.handlers
import os
import signal
import sys
import threading
import traceback
from pathlib import Path
from typing import TextIO

from liveviews.errors import failure_line
from liveviews.pipeline.settings import Settings

LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}
CHATTER = ("py4j", "pyspark", "uvicorn", "py.warnings")
"""The libraries' loggers: below WARNING dropped, below ERROR kept in the file only."""
HANDLERS = ("liveviews.console", "liveviews.file")
FILE_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
NAME_WIDTH = 9
FILE_ONLY = {"file_only": True}
"""``extra`` of a log call whose lines belong in the log file only: a traceback behind a
sentence the console already shows."""


def log_file(process: str, settings: Settings) -> Path:
    """Where ``process`` (``pipeline``, ``gateway``, ...) keeps its routine lines."""
    return settings.data_dir / "logs" / f"{process}.log"


def shown(path: Path) -> str:
    """``path`` as a person reads it: relative to the working directory when under it."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


class ConsoleFormatter(logging.Formatter):
    """``12:00:01 pipeline  ready: ...``; warnings and errors say so before the sentence.

    Under honcho (``make run``) each line already starts with the time and the process's name,
    so they are not written twice.
    """

    def __init__(self, process: str, *, prefixed: bool, debug: bool) -> None:
        super().__init__("%(message)s")
        self.process = process
        self.prefixed = prefixed
        self.debug = debug
        self.log_path: Path | None = None
        """The log file that keeps the tracebacks the console leaves out, if it can be written."""

    def format(self, record: logging.LogRecord) -> str:
        exc = record.exc_info[1] if record.exc_info else None
        if exc is None or self.debug:
            text = super().format(record)
        else:  # a traceback is for the file: the console says what failed, in one line
            kept = (
                f"the traceback is in {shown(self.log_path)}"
                if self.log_path
                else "no traceback kept"
            )
            text = f"{record.getMessage()} ({exception_line(exc)}; {kept})"
        if self.debug:
            text = f"{record.levelname.lower()} {record.name}: {text}"
        elif record.levelno >= logging.WARNING:
            text = f"{record.levelname.lower()}: {text}"
        if self.prefixed:
            return text
        return f"{self.formatTime(record, '%H:%M:%S')} {self.process:<{NAME_WIDTH}} {text}"


def exception_line(exc: BaseException) -> str:
    """What failed, in one line (``liveviews.errors.failure_line``), named by its type when its
    text names no error."""
    name = type(exc).__name__
    try:
        text = str(exc)
    except Exception:  # py4j asks the JVM for its error's text, and the JVM may be gone
        return name
    return failure_line(f"{name}: {text}" if text else name)


def from_library(record: logging.LogRecord) -> bool:
    """Is ``record`` one of the libraries' lines? py4j also logs through the root logger."""
    name = record.name
    if name == "root":
        return f"{os.sep}py4j{os.sep}" in record.pathname
    return any(name == lib or name.startswith(f"{lib}.") for lib in CHATTER)


def cancelled_by_a_stop(record: logging.LogRecord) -> bool:
    """Is ``record`` py4j's report of a micro-batch whose Spark job was cancelled because its
    query was stopped? A switch of versions stops the replaced query, and a shutdown every
    query; the batch is not lost (it runs again from the checkpoint if the query runs again)."""
    if record.exc_info is None or record.exc_info[1] is None:
        return False
    text = "".join(traceback.format_exception(record.exc_info[1]))
    return "[SPARK_JOB_CANCELLED]" in text and "was stopped" in text


class LibraryLines(logging.Filter):
    """Keeps the libraries' lines below ``threshold`` off the console, and their traceback of
    a batch cancelled by its query's stop (kept in the file)."""

    def __init__(self) -> None:
        super().__init__()
        self.threshold = logging.ERROR

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "file_only", False):
            return False
        if not from_library(record):
            return True
        return record.levelno >= self.threshold and not cancelled_by_a_stop(record)


def stop_requested() -> threading.Event:
    """An event the first SIGINT or SIGTERM sets, for a process that stops what it started
    before it ends. Caught by a handler, not blocked: the processes it starts inherit blocked
    signals (and would ignore a stop) but not handlers."""
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    return stop


def stopping() -> None:
    """The process is stopping: the libraries' errors go only to the file from now on.

    A stop reaches the pipeline's whole process group, so the Spark driver ends while the
    pipeline stops its queries, and py4j then reports each call the driver no longer answers.
    """
    for handler in logging.getLogger().handlers:
        if handler.get_name() != HANDLERS[0]:
            continue
        for found in handler.filters:
            if isinstance(found, LibraryLines):
                found.threshold = logging.CRITICAL + 1


def setup(process: str, settings: Settings, *, stream: TextIO | None = None) -> Path | None:
    """Send this process's log lines to the console and to its log file; returns the file's
    path, or None when it cannot be written (the routine lines are then not kept). Calling it
    again replaces what an earlier call set up."""
    level = settings.log_level
    debug = level == "debug"
    root = logging.getLogger()
    for handler in [h for h in root.handlers if h.get_name() in HANDLERS]:
        root.removeHandler(handler)
        handler.close()
    root.setLevel(logging.DEBUG if debug else logging.INFO)
    for lib in CHATTER:
        logging.getLogger(lib).setLevel(logging.DEBUG if debug else logging.WARNING)
    # Python's warnings (a library's deprecation notice, say) become log lines, so that they
    # go where the other routine lines go.
    logging.captureWarnings(True)

    console = logging.StreamHandler(sys.stderr if stream is None else stream)
    console.set_name(HANDLERS[0])
    console.setLevel(LEVELS[level])
    prefixed = bool(os.environ.get("HONCHO_PROCESS_NAME"))
    formatter = ConsoleFormatter(process, prefixed=prefixed, debug=debug)
    console.setFormatter(formatter)
    if not debug:
        console.addFilter(LibraryLines())
    root.addHandler(console)

    path = log_file(process, settings)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # Reopened when the file is moved: the pipeline's JVM rolls the file they share.
        file = logging.handlers.WatchedFileHandler(path, encoding="utf-8")
    except OSError as exc:
        logging.getLogger("liveviews.console").warning(
            "cannot write the log file %s (%s); the libraries' routine lines are not kept",
            path, exc,
        )  # fmt: skip
        return None
    file.set_name(HANDLERS[1])
    file.setLevel(logging.DEBUG if debug else logging.INFO)
    file.setFormatter(logging.Formatter(FILE_FORMAT))
    root.addHandler(file)
    formatter.log_path = path
    return path
