"""``python -m liveviews.pipeline`` exits when it is done, whatever its threads left behind.

When the Spark driver dies, a py4j thread may be stopped by the interpreter's finalization while
it holds the logging lock, and py4j's connections log from ``__del__`` during that
finalization: the process then waited forever instead of exiting to be restarted (seen in the
driver-kill fault runs). Here a daemon thread holds the lock for good, and an object logs from
``__del__`` at exit, as py4j's do.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

SCRIPT = textwrap.dedent(
    """
    import logging, runpy, sys, threading

    logging.basicConfig(level=logging.INFO)
    held = threading.Event()

    def hold_the_logging_lock():
        logging.getLogger().handlers[0].acquire()
        held.set()
        threading.Event().wait()  # a py4j thread that will never run again

    class Connection:  # like py4j's ClientServerConnection
        def __del__(self):
            logging.getLogger("py4j.clientserver").info("Closing down clientserver connection")

    connection = Connection()
    threading.Thread(target=hold_the_logging_lock, daemon=True).start()
    held.wait()
    sys.argv = ["liveviews.pipeline", "--check"]
    runpy.run_module("liveviews.pipeline", run_name="__main__", alter_sys=True)
    """
)


def test_the_pipeline_process_exits_though_a_thread_holds_the_logging_lock() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=30
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
