"""A run that leaves a process it started running fails, naming it (tests/support/leftovers.py);
one that stops what it starts passes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

LEAVES = """
import os
import subprocess

def test_starts_a_process_and_forgets_it():
    proc = subprocess.Popen(["sleep", "300"], start_new_session=True)
    with open(os.environ["LV_LEFT_PID_FILE"], "w") as out:
        out.write(str(proc.pid))
"""
STOPS = """
import subprocess

def test_starts_a_process_and_stops_it():
    proc = subprocess.Popen(["sleep", "300"])
    proc.kill()
    proc.wait()
"""


def inner_run(tmp_path: Path, source: str) -> subprocess.CompletedProcess[str]:
    test = tmp_path / "test_inner.py"
    test.write_text(source)
    env = {**os.environ, "LV_TEST_GRACE_S": "1", "LV_LEFT_PID_FILE": str(tmp_path / "left.pid")}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.conftest",
         "--rootdir", str(tmp_path), "-c", os.devnull, str(test)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_a_process_left_running_fails_the_run_and_is_killed(tmp_path: Path) -> None:
    done = inner_run(tmp_path, LEAVES)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "were still running at its end (killed now)" in done.stdout
    assert "sleep 300" in done.stdout
    # That very process, not any "sleep 300" of the machine's (a shell's, say).
    pid = int((tmp_path / "left.pid").read_text())
    cmdline = Path(f"/proc/{pid}/cmdline")
    alive = cmdline.exists() and cmdline.read_bytes().split(b"\0")[:2] == [b"sleep", b"300"]
    assert not alive, "the process left behind was not killed"


def test_a_run_that_stops_what_it_starts_passes(tmp_path: Path) -> None:
    done = inner_run(tmp_path, STOPS)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "still running" not in done.stdout
