"""``python -m deploy.spark``: a cluster on this machine until stopped, and stopped whole."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from tests.support.processes import descendants

ROOT = Path(__file__).resolve().parents[2]


def test_the_command_starts_a_master_and_its_workers_and_stops_them(tmp_path: Path) -> None:
    command = subprocess.Popen(
        [sys.executable, "-m", "deploy.spark", "--workers", "1", "--dir", str(tmp_path)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        assert command.stdout is not None
        line = command.stdout.readline()  # printed once every worker has registered
        assert line.startswith("Spark master spark://127.0.0.1:"), line
        ui = line.split("status at ")[1].split(";")[0]
        with urllib.request.urlopen(f"{ui}/json/", timeout=5) as answer:
            status = json.loads(answer.read())
        assert status["status"] == "ALIVE"
        assert [w["state"] for w in status["workers"]] == ["ALIVE"]
        assert status["workers"][0]["cores"] == 1
        started = descendants(command.pid)
        assert len(started) >= 2  # the master's and the worker's JVMs
        command.send_signal(signal.SIGTERM)
        assert command.wait(60) == 0
        deadline = time.monotonic() + 10
        while [p for p in started if _running(p)] and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [p for p in started if _running(p)], "a process of the cluster outlived it"
    finally:
        if command.poll() is None:
            command.kill()
            command.wait()
    assert (tmp_path / "master.log").is_file() and (tmp_path / "worker-1" / "work").is_dir()


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"
