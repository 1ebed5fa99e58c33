"""``python -m liveviews.supervise NAME -- COMMAND...``: keep one process of ``make run`` up.

honcho, which runs the Procfile, stops every process when one exits. Under this supervisor a
process that fails (the pipeline after its store or its JVM went away, a gateway that
crashed) is started again after a pause that doubles up to ``MAX_BACKOFF_S``, while the other
processes keep serving: the gateway keeps answering snapshots and open subscriptions while the
pipeline restarts, and the pipeline resumes from its checkpoints.

Two exits are final and end the supervisor with the same status: 0 (asked to stop) and
``NEEDS_A_PERSON`` (2: a setting, the store's layout or a checkpoint must be changed by hand,
and the process said which in a sentence; starting it again would only say it again).
"""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
import threading
import time

log = logging.getLogger("liveviews.supervise")

NEEDS_A_PERSON = 2
FIRST_BACKOFF_S = 1.0
MAX_BACKOFF_S = 30.0
HEALTHY_S = 60.0
"""A process that ran this long before failing starts again after ``FIRST_BACKOFF_S``."""
USAGE = "usage: python -m liveviews.supervise NAME -- COMMAND [ARG...]"


def supervise(name: str, command: list[str], stop: threading.Event) -> int:
    """Run ``command`` until it exits 0 or ``NEEDS_A_PERSON``, or ``stop`` is set."""
    backoff = FIRST_BACKOFF_S
    while True:
        started = time.monotonic()
        child = subprocess.Popen(command)
        while child.poll() is None:
            if stop.wait(0.2):
                child.send_signal(signal.SIGTERM)
                return child.wait()
        status = child.returncode
        if stop.is_set() or status in (0, NEEDS_A_PERSON):
            return status
        if time.monotonic() - started >= HEALTHY_S:
            backoff = FIRST_BACKOFF_S
        log.warning("%s exited with status %s; starting it again in %.0f s", name, status, backoff)
        if stop.wait(backoff):
            return status
        backoff = min(MAX_BACKOFF_S, backoff * 2)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) < 3 or args[1] != "--":
        print(USAGE, file=sys.stderr)
        return NEEDS_A_PERSON
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    stop = threading.Event()

    def stop_asked(*_: object) -> None:
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, stop_asked)
    return supervise(args[0], args[2:], stop)


if __name__ == "__main__":
    sys.exit(main())
