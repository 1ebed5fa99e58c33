"""What a benchmark starts ends with it, however the benchmark ends.

A benchmark starts stores, pipelines (a Python process and its driver JVM, which starts Python
workers of its own), gateways and browsers. When the benchmark was killed (a test's timeout, an
operator's Ctrl-C on the harness, a SIGTERM from CI), they used to keep running, orphaned, and
load the machine for every later benchmark and test. A process that calls :func:`guard`:

- becomes a *subreaper*: a descendant whose parent dies is re-parented to it rather than to
  init, so every process it started, however deep, stays findable among its descendants;
- with ``die_with_parent``, receives SIGTERM when the process that started it dies, however
  that one died (SIGKILL too): for a benchmark the harness runs, not for the harness itself,
  which a person may start in the background of a shell they then leave (``nohup``);
- turns SIGTERM and SIGHUP into ``SystemExit`` (SIGHUP unless ``nohup`` ignores it), so that
  the benchmark's ``finally`` blocks and context managers stop what they started the orderly
  way;
- at exit, stops every descendant still running: SIGTERM, then SIGKILL after a grace period.

Linux only (``prctl``); elsewhere only the last two hold.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import signal
import subprocess
import sys
from collections.abc import Sequence
from types import FrameType

import psutil

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
GRACE_S = 15.0
"""How long a descendant has to stop after SIGTERM before it is killed: a store flushes its
append-only file, a pipeline stops its queries."""


def _prctl(option: int, value: int) -> None:
    if sys.platform == "linux":
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)


def _exit_on_signal(signum: int, _frame: FrameType | None) -> None:
    # Once: a second signal during the orderly stop must not cut it short; atexit still runs.
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    raise SystemExit(128 + signum)


def guard(*, die_with_parent: bool = False) -> None:
    """Make this process own everything it starts (see the module's docstring)."""
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    if die_with_parent:
        _prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) is not signal.SIG_IGN:
            signal.signal(sig, _exit_on_signal)
    atexit.register(stop_descendants)


def stop_processes(processes: Sequence[psutil.Process], grace: float = GRACE_S) -> None:
    """SIGTERM to each of ``processes``, and SIGKILL to those still running ``grace`` s later."""
    for p in processes:
        with contextlib.suppress(psutil.Error):
            p.terminate()
    _, alive = psutil.wait_procs(processes, timeout=grace)
    for p in alive:
        with contextlib.suppress(psutil.Error):
            p.kill()
    psutil.wait_procs(alive, timeout=5)


ENDS_WITH_PARENT = ("multiprocessing.resource_tracker",)
"""Helpers that ignore SIGTERM by design and end when the process that started them does: left
alone, rather than waited for and killed."""


def stop_descendants(grace: float = GRACE_S) -> None:
    """Stop every process this one started, however deep, that is still running."""
    with contextlib.suppress(psutil.Error):
        stop_processes([p for p in psutil.Process().children(recursive=True)
                        if not _ends_with_parent(p)], grace)  # fmt: skip


def _ends_with_parent(p: psutil.Process) -> bool:
    try:
        command = " ".join(p.cmdline())
    except psutil.Error:
        return False
    return any(helper in command for helper in ENDS_WITH_PARENT)


def stop_tree(process: subprocess.Popen[bytes] | subprocess.Popen[str],
              grace: float = GRACE_S) -> None:  # fmt: skip
    """Stop ``process`` and every descendant it has now: the process first, so that it can
    stop its own the orderly way, then whatever of its tree is left after ``grace`` s."""
    try:
        tree = psutil.Process(process.pid).children(recursive=True)
    except psutil.Error:
        tree = []
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(grace)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    _, alive = psutil.wait_procs(tree, timeout=grace)
    stop_processes(alive, grace=5)
