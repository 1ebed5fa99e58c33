"""``make test``'s two workers (pytest-xdist) take the groups of tests/conftest.py whole: every
test on the SparkSession runs on one worker, so a run starts one session."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

ON_SPARK = """
import os
import pytest

@pytest.fixture()
def spark():  # the run's session, as tests/conftest.py's: here, which worker holds it
    with open(os.environ["LV_WORKERS_FILE"], "a") as out:
        out.write(os.environ.get("PYTEST_XDIST_WORKER", "none") + "\\n")

@pytest.mark.parametrize("n", range(6))
def test_on_spark(spark, n):
    pass
"""
ELSEWHERE = """
import pytest

@pytest.mark.parametrize("n", range(6))
def test_elsewhere(n):
    pass
"""


def test_every_test_on_the_sparksession_runs_on_one_worker(tmp_path: Path) -> None:
    for name in ("a", "c"):
        (tmp_path / f"test_{name}_spark.py").write_text(ON_SPARK)
    for name in ("b", "d"):
        (tmp_path / f"test_{name}_elsewhere.py").write_text(ELSEWHERE)
    workers = tmp_path / "workers.txt"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.conftest",
         "-n", "2", "--dist", "loadgroup", "--rootdir", str(tmp_path), "-c", os.devnull,
         str(tmp_path)],
        cwd=ROOT, env={**env, "LV_WORKERS_FILE": str(workers)}, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    seen = workers.read_text().split()
    assert len(seen) == 12, seen
    assert len(set(seen)) == 1 and seen[0].startswith("gw"), seen
