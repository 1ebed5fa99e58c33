"""Spark's scratch directory in local mode: under the data directory, one per pipeline process,
and what pipelines that were killed left there removed when the next one starts.

Spark keeps its scratch files under ``spark.local.dir`` (``/tmp`` by default): shuffle files,
and each state store's RocksDB working copy (~4 MB per state partition for Chirp's demo
state, as much as the state itself for a large one). The driver removes them when it stops
normally; a pipeline that is killed (SIGKILL, the kernel's OOM killer, a supervisor's hard
stop) leaves them, once per start. Each pipeline process now uses
``<data dir>/spark-local/<pid>``; at start, the directories of processes that no longer run
are removed. On a cluster, executors keep their cluster manager's local directories.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

LOCAL_DIR = "spark.local.dir"
ROOT = "spark-local"


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: not ours to judge
    return True


def prepare(data_dir: Path, name: str = ROOT) -> Path:
    """This process's directory under ``data_dir / name``, after removing those of processes
    that are gone."""
    root = data_dir / name
    root.mkdir(parents=True, exist_ok=True)
    mine = os.getpid()
    for child in root.iterdir():
        if child.name.isdigit() and int(child.name) != mine and not _running(int(child.name)):
            shutil.rmtree(child, ignore_errors=True)
    directory = root / str(mine)
    directory.mkdir(exist_ok=True)
    return directory


def spark_conf(master: str, data_dir: Path, own: dict[str, str]) -> dict[str, str]:
    """In local mode, unless the user chose a directory: this process's, prepared."""
    if not master.startswith("local") or LOCAL_DIR in own:
        return {}
    return {LOCAL_DIR: str(prepare(data_dir))}
