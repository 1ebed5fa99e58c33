"""Nothing a test run starts outlives it.

Every process a run starts inherits ``LV_TEST_RUN``, a value of the run's own, from the pytest
process, however far down it is started and wherever its parent goes (a Spark JVM whose
pipeline process died is a child of init). At the end of the session, once every fixture has
stopped what it started, a process still running with that value was left behind: it slows every
run after it, as the orphans of a benchmark harness once did for 45 minutes. The session then
fails, naming each one, and the processes are killed.
"""

from __future__ import annotations

import os
import secrets
import time

import psutil

MARK = "LV_TEST_RUN"
GRACE_S = float(os.environ.get("LV_TEST_GRACE_S") or 15)
"""How long processes that are stopping get to finish before they count as left behind."""


def mark_run() -> None:
    os.environ[MARK] = secrets.token_hex(8)


def started_by_this_run() -> list[psutil.Process]:
    mark, me = os.environ.get(MARK), os.getpid()
    found = []
    for p in psutil.process_iter():
        try:
            if p.pid != me and p.status() != psutil.STATUS_ZOMBIE and p.environ().get(MARK) == mark:
                found.append(p)
        except psutil.Error:  # gone meanwhile, or not ours to read
            continue
    return found


def left_behind() -> list[str]:
    """The processes of this run still running after the grace, each killed; their commands."""
    deadline = time.monotonic() + GRACE_S
    while (left := started_by_this_run()) and time.monotonic() < deadline:
        time.sleep(0.5)
    shown = []
    for p in left:
        try:
            shown.append(f"{p.pid}: {' '.join(p.cmdline())[:200]}")
            p.kill()
        except psutil.Error:
            continue
    return shown
