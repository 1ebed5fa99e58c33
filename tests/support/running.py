"""Waiting on processes a test started, each writing its output to a file named after it."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest


def wait_while_running(
    what: str,
    predicate: Callable[[], bool],
    procs: dict[str, subprocess.Popen[bytes]],
    logs: Path,
    timeout: float = 60.0,
) -> None:
    """Until ``predicate()`` holds; fail at once with its output when one of ``procs`` exits
    (its output is ``logs / name``), and with every one's output after ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for name, proc in procs.items():
            if proc.poll() is not None:
                pytest.fail(f"{name} exited ({proc.returncode}):\n{(logs / name).read_text()}")
        if predicate():
            return
        time.sleep(0.2)
    pytest.fail(f"timed out waiting for {what}:\n"
                + "\n".join((logs / n).read_text()[-4000:] for n in procs))  # fmt: skip
