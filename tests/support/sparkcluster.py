"""A Spark standalone cluster for tests, and a Python for its executors without the project.

The test virtualenv has the project installed in editable mode: a ``.pth`` hook there makes
``streaming`` and ``demo`` importable from any directory, so executors running that interpreter
would find the code whether the driver shipped it or not. The executors here run an interpreter
of their own that sees the virtualenv's installed packages (PySpark, pyarrow, redis, ...) as
plain path entries, whose ``.pth`` hooks do not run: like a worker machine with the
dependencies installed and never a copy of the project.
"""

from __future__ import annotations

import os
import site
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from deploy.spark import StandaloneCluster

WORKERS = 2
WORKER_CORES = 1
WORKER_MEMORY = "1g"


def executor_python(root: Path, leave_out: tuple[str, ...] = ()) -> Path:
    """An interpreter that imports this virtualenv's packages but not the project, nor the
    distributions named in ``leave_out`` (as if they were not installed)."""
    venv = root / "executor-python"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    packages = venv / "lib" / version / "site-packages"
    paths = [Path(p) for p in site.getsitepackages()]
    if leave_out:
        paths = [_without(paths, leave_out, root / "dependencies")]
    (packages / "liveviews-dependencies.pth").write_text("".join(f"{p}\n" for p in paths))
    return venv / "bin" / "python"


def _without(paths: list[Path], leave_out: tuple[str, ...], target: Path) -> Path:
    """One directory of links to every entry of ``paths`` but the ``leave_out`` ones."""
    target.mkdir()
    for directory in paths:
        for entry in directory.iterdir():
            if not entry.name.lower().startswith(leave_out) and not (target / entry.name).exists():
                (target / entry.name).symlink_to(entry)
    return target


def worker_env(python: Path) -> dict[str, str]:
    """What the workers start with: no ``PYTHONPATH``, and executors' Python ``python``."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYSPARK_PYTHON"] = str(python)
    return env


@contextmanager
def running_cluster(
    root: Path, python: Path, workers: int = WORKERS
) -> Iterator[StandaloneCluster]:
    """A master and ``workers`` workers of one core each, registered, under ``root``."""
    with StandaloneCluster(root / "cluster", worker_env(python)) as cluster:
        for _ in range(workers):
            cluster.add_worker(WORKER_CORES, WORKER_MEMORY)
        cluster.wait_for_workers(workers)
        yield cluster
