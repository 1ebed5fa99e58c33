"""``python -m demo``: the writer of the demo application ``LV_APP`` names.

Chirp's (``demo.chirp``) and the board's (``demo.board``) append events; the shop's
(``demo.orders``) writes SQL into PostgreSQL.
For an application of your own there is nothing to write: it says so and waits to be stopped,
since ``make run`` stops every process when one of them ends.
"""

from __future__ import annotations

import os
import runpy
import signal
import sys

WRITERS = {
    "demo.chirp:app": "demo.chirp",
    "demo.orders:app": "demo.orders",
    "demo.board:app": "demo.board",
}
DEFAULT_APP = "demo.chirp:app"


def main() -> int:
    spec = os.environ.get("LV_APP") or DEFAULT_APP
    writer = WRITERS.get(spec)
    if writer is None:
        print(f"demo: LV_APP={spec} is not a demo application; no demo writer runs.", flush=True)
        stop = {signal.SIGINT, signal.SIGTERM}
        signal.pthread_sigmask(signal.SIG_BLOCK, stop)
        signal.sigwait(stop)
        return 0
    runpy.run_module(writer, run_name="__main__", alter_sys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
