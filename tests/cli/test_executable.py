"""The installed ``liveviews`` executable, as an operator runs it: help on every command, a
status against the test store, and a tail that Ctrl-C ends with exit 0."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
import redis

from tests.cli.conftest import Pipelines, profile

EXECUTABLE = Path(sys.executable).parent / "liveviews"
COMMANDS = [
    [], ["dev"], ["serve"], ["pipeline"], ["cdc"], ["store"], ["status"], ["rebuild"], ["switch"], ["abort"], ["inspect"], ["tail"],
    ["deadletters"], ["deadletters", "list"], ["deadletters", "show"], ["deadletters", "replay"],
]  # fmt: skip


@pytest.fixture()
def shell_env(env: dict[str, str]) -> dict[str, str]:
    return {**os.environ, **env}


def _run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(EXECUTABLE), *args], env=env, capture_output=True, text=True,
                          timeout=60)  # fmt: skip


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "liveviews")
def test_every_command_has_help(command: list[str], shell_env: dict[str, str]) -> None:
    done = _run([*command, "--help"], shell_env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"Usage: liveviews {' '.join(command)}".rstrip())


def test_status_as_json_against_the_store(
    shell_env: dict[str, str], store: redis.Redis, pipelines: Pipelines
) -> None:
    pipelines.append(profile("alice", "A"))
    done = _run(["status", "--json"], shell_env)
    assert done.returncode == 0, done.stderr
    doc = orjson.loads(done.stdout)
    assert doc["log"]["events"] == 1
    assert {p["pipeline"] for p in doc["pipelines"]} == {"entities", "profiles", "activity"}
    usage = _run(["status", "--minutes", "soon"], shell_env)
    assert usage.returncode == 2 and "Traceback" not in usage.stderr


def test_ctrl_c_ends_a_tail_with_exit_0(
    shell_env: dict[str, str], store: redis.Redis, pipelines: Pipelines
) -> None:
    tail = subprocess.Popen([str(EXECUTABLE), "tail", "--json"], env=shell_env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        # Appended until the tail shows one: then it is surely reading.
        assert tail.stdout is not None
        for _ in range(100):
            pipelines.append(profile("alice", "A"))
            if select.select([tail.stdout], [], [], 0.1)[0]:
                break
        assert orjson.loads(tail.stdout.readline())["key"] == "alice"
        tail.send_signal(signal.SIGINT)
        assert tail.wait(10) == 0
        assert tail.stderr is not None and "Traceback" not in tail.stderr.read()
    finally:
        if tail.poll() is None:
            tail.kill()
