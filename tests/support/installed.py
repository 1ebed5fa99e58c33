"""The package as a team installs it, made once per test run: a wheel built from this checkout,
and a virtualenv outside the checkout with the wheel and its ``spark`` extra installed from the
package index. tests/test_install.py and tests/test_tutorial.py both run applications from it
(the fixtures are registered in tests/conftest.py, so the run builds them once)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run(argv: Sequence[str | Path], **kwargs: object) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` to its end; fail with its output unless it exits 0."""
    done = subprocess.run([str(a) for a in argv], capture_output=True, text=True, **kwargs)  # type: ignore[call-overload]
    assert done.returncode == 0, f"{argv}:\n{done.stdout}\n{done.stderr}"
    return done


def clean_env(**extra: str) -> dict[str, str]:
    """The environment of a shell outside this checkout: nothing of the test run's own."""
    dropped = ("PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "REDIS_URL", "VIRTUAL_ENV")
    env = {k: v for k, v in os.environ.items() if k not in dropped and not k.startswith("LV_")}
    return {**env, "LV_CLASS_ARCHIVE": "off", **extra}


def make_venv(path: Path, wheel: Path, extras: str) -> Path:
    """A fresh virtualenv at ``path`` with ``wheel`` and its ``extras`` installed from the
    package index, as a team installs it; its bin/ folder. Outside this run's environment: a
    path to the checkout would show pip a liveviews installed already."""
    env = clean_env()
    run([sys.executable, "-m", "venv", path], timeout=300, env=env)
    target = f"{wheel}[{extras}]" if extras else str(wheel)
    run([path / "bin" / "pip", "install", "-q", "--disable-pip-version-check", target],
        timeout=900, env=env)  # fmt: skip
    assert (path / "bin" / "liveviews").exists(), f"pip did not install liveviews in {path}"
    return path / "bin"


def stop_dev(proc: subprocess.Popen[bytes]) -> None:
    """Stop ``liveviews dev`` (started with ``start_new_session=True``) as a person does, with
    Ctrl-C; whatever it started must be gone with it."""
    stopped = proc.poll() is None
    if stopped:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
    left = _wait_gone(proc.pid, timeout=60)
    if left:
        os.killpg(proc.pid, signal.SIGKILL)
    assert not (stopped and left), "liveviews dev left processes running after Ctrl-C"


def _wait_gone(group: int, timeout: float) -> bool:
    """Wait until no process of the session ``group`` is left; whether some still are."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.killpg(group, 0)
        except ProcessLookupError:
            return False
        time.sleep(0.2)
    return True


@pytest.fixture(scope="session")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel built from this checkout."""
    dist = tmp_path_factory.mktemp("dist")
    run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--disable-pip-version-check",
         "-w", dist, ROOT], timeout=600, env=clean_env())  # fmt: skip
    (built,) = dist.glob("liveviews-*.whl")
    return built


@pytest.fixture(scope="session")
def spark_venv(tmp_path_factory: pytest.TempPathFactory, wheel: Path) -> Path:
    """The bin/ folder of a virtualenv with the wheel and its ``spark`` extra. Shared by the
    tests that ask for it: one may add a package to it (the tutorial installs pytest), none
    removes one or changes the installed liveviews."""
    return make_venv(tmp_path_factory.mktemp("installed") / "venv-spark", wheel, "spark")
