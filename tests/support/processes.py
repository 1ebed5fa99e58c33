"""Processes as /proc shows them: a pipeline's descendants, and its Spark driver JVM."""

from __future__ import annotations

import os
import time
from pathlib import Path


def descendants(pid: int) -> list[int]:
    """Every process below ``pid``, read from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def cmdline(pid: int) -> list[bytes]:
    """A process's command line; empty once it has ended (a zombie's reads as nothing)."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return raw.rstrip(b"\0").split(b"\0") if raw else []


def builders(pid: int) -> list[int]:
    """The processes building a version that the pipeline process ``pid`` started
    (``python -m liveviews.pipeline --build``)."""
    return [child for child in descendants(pid) if b"--build" in cmdline(child)]


def spark_jvm(pid: int, timeout: float = 60) -> int:
    """The pid of the Spark driver JVM among the descendants of ``pid`` (a pipeline process),
    not counting the JVMs of the versions it builds in processes of their own."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        apart = {jvm for b in builders(pid) for jvm in descendants(b)}
        for child in descendants(pid):
            command = cmdline(child)
            # spark-submit first runs a short-lived launcher JVM; the driver runs SparkSubmit.
            if (
                child not in apart
                and command
                and command[0].endswith(b"java")
                and b"org.apache.spark.deploy.SparkSubmit" in command
            ):
                return child
        time.sleep(0.2)
    raise AssertionError("the pipeline's Spark JVM did not start")
