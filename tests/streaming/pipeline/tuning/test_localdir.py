"""Spark's scratch files under the data directory, and a killed pipeline's removed at start."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from liveviews.pipeline.tuning import localdir


def a_finished_pid() -> int:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    return int(done.stdout)


def test_a_start_removes_what_gone_processes_left_and_keeps_the_rest(tmp_path: Path) -> None:
    root = tmp_path / localdir.ROOT
    gone = root / str(a_finished_pid())
    (gone / "blockmgr-1").mkdir(parents=True)
    (gone / "blockmgr-1" / "shuffle_0_0_0.data").write_bytes(b"x" * 1000)
    running = root / str(os.getppid())  # the test runner's parent: alive
    running.mkdir()
    other = root / "notes"
    other.mkdir()
    mine = localdir.prepare(tmp_path)
    assert mine == root / str(os.getpid()) and mine.is_dir()
    assert not gone.exists()
    assert running.is_dir() and other.is_dir()
    assert localdir.prepare(tmp_path) == mine  # a second call keeps this process's own


def test_local_mode_only_and_the_users_choice_wins(tmp_path: Path) -> None:
    assert localdir.spark_conf("local[2]", tmp_path, {}) == {
        localdir.LOCAL_DIR: str(tmp_path / localdir.ROOT / str(os.getpid()))
    }
    assert localdir.spark_conf("spark://master:7077", tmp_path / "c", {}) == {}
    assert localdir.spark_conf("local[2]", tmp_path / "u", {localdir.LOCAL_DIR: "/scratch"}) == {}
    assert not (tmp_path / "c").exists() and not (tmp_path / "u").exists()


def test_the_pipelines_spark_keeps_its_scratch_files_in_the_data_directory(spark: Any) -> None:
    conf = spark.sparkContext.getConf()
    local = Path(conf.get(localdir.LOCAL_DIR))
    assert local.parent.name == localdir.ROOT and local.name == str(os.getpid())
    # Where Spark puts shuffle files and state stores' working copies.
    scratch = Path(spark._jvm.org.apache.spark.util.Utils.getLocalDir(spark._jsc.sc().conf()))
    assert scratch.is_relative_to(local)
