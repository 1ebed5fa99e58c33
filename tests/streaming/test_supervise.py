"""``make run``'s processes are started again when they fail, and only then."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

SCRIPT = """
import sys, pathlib
runs = pathlib.Path(sys.argv[1])
n = len(runs.read_text()) if runs.exists() else 0
runs.write_text("x" * (n + 1))
sys.exit(int(sys.argv[2].split(",")[n]) if n < len(sys.argv[2].split(",")) else 0)
"""


def _supervise(tmp_path: Path, statuses: str) -> tuple[subprocess.CompletedProcess[str], int]:
    runs = tmp_path / "runs"
    done = subprocess.run(
        [sys.executable, "-m", "liveviews.supervise", "flaky", "--",
         sys.executable, "-c", SCRIPT, str(runs), statuses],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    return done, len(runs.read_text())


def test_a_failing_process_is_started_again_with_a_growing_pause(tmp_path):
    t0 = time.monotonic()
    done, runs = _supervise(tmp_path, "3,1")
    assert done.returncode == 0 and runs == 3
    assert time.monotonic() - t0 >= 3.0  # paused 1 s, then 2 s
    assert "flaky exited with status 3; starting it again in 1 s" in done.stderr
    assert "flaky exited with status 1; starting it again in 2 s" in done.stderr


def test_an_exit_that_needs_a_person_is_final(tmp_path):
    done, runs = _supervise(tmp_path, "2")
    assert done.returncode == 2 and runs == 1


def test_stopping_the_supervisor_stops_its_process(tmp_path):
    marker = tmp_path / "stopped"
    child = (
        "import signal, sys, time, pathlib\n"
        "signal.signal(signal.SIGTERM, lambda *a: (pathlib.Path(sys.argv[1]).write_text('y'),"
        " sys.exit(0)))\n"
        "while True: time.sleep(0.05)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "liveviews.supervise", "sleeper", "--",
         sys.executable, "-c", child, str(marker)],
    )  # fmt: skip
    time.sleep(1.0)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=10) == 0
    assert marker.read_text() == "y"
