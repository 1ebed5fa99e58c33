"""A run that leaves a process it started running fails, naming it (tests/support/leftovers.py);
one that stops what it starts passes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

LEAVES = """
import subprocess

def test_starts_a_process_and_forgets_it():
    subprocess.Popen(["sleep", "300"], start_new_session=True)
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
    env = {**os.environ, "LV_TEST_GRACE_S": "1"}
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
    left = subprocess.run(["pgrep", "-f", "^sleep 300$"], capture_output=True, text=True)
    assert left.stdout == "", "the process left behind was not killed"


def test_a_run_that_stops_what_it_starts_passes(tmp_path: Path) -> None:
    done = inner_run(tmp_path, STOPS)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "still running" not in done.stdout
