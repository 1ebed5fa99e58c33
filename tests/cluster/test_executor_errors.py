"""An executor that cannot run the pipeline stops its start with an error saying what to change."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from deploy.spark import HOST, StandaloneCluster
from liveviews.supervise import NEEDS_A_PERSON
from tests.faults.harness import ROOT
from tests.support.sparkcluster import executor_python


def test_an_executor_python_without_a_dependency_names_it(
    store_url: str, tmp_path: Path, cluster: StandaloneCluster
) -> None:
    python = executor_python(tmp_path / "python", leave_out=("orjson",))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(
        REDIS_URL=store_url,
        SPARK_MASTER=cluster.master_url,
        SPARK_LOCAL_IP=HOST,
        PYSPARK_PYTHON=str(python),
        LV_DATA_DIR=str(tmp_path / "data"),
        LV_CHECKPOINT_DIR=str(tmp_path / "checkpoints"),
        LV_DRIVER_MEMORY="1g",
    )
    started = subprocess.run(
        [sys.executable, "-m", "liveviews.pipeline"], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=240,
    )  # fmt: skip
    assert started.returncode == NEEDS_A_PERSON, started.stdout + started.stderr
    assert "the executors' Python cannot import what the pipeline needs" in started.stderr
    assert "orjson" in started.stderr and "PYSPARK_PYTHON" in started.stderr
