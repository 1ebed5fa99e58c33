"""Spark's Python processes import the installed PySpark, not Spark's zipped copy of it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from liveviews.errors import ConfigurationError
from liveviews.pipeline.settings import Settings
from liveviews.pipeline.tuning import pythonlauncher

PROBE = (
    "import json, sys, pyspark, py4j; "
    "print(json.dumps([pyspark.__file__, py4j.__file__, sys.path]))"
)


def spark_pythonpath(home: Path) -> list[str]:
    """PYTHONPATH as Spark builds it for a pip-installed PySpark (``PythonUtils``): its zips,
    then the spark-core jar, then the user's entries."""
    lib = home / "python" / "lib"
    return [str(lib / "pyspark.zip"), *map(str, sorted(lib.glob("py4j-*-src.zip"))),
            *map(str, sorted((home / "jars").glob("spark-core_*.jar")))]  # fmt: skip


def test_the_copies_spark_adds_are_the_ones_left_out() -> None:
    home = pythonlauncher.installed_pyspark()
    added = spark_pythonpath(home)
    assert len(added) == 3 and all(Path(p).is_file() for p in added)
    assert sorted(pythonlauncher.spark_copies(home)) == sorted(added)


def test_the_launcher_runs_the_interpreter_without_sparks_copies(tmp_path: Path) -> None:
    home = pythonlauncher.installed_pyspark()
    own = tmp_path / "own modules"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*spark_pythonpath(home), str(own)])}
    assert pythonlauncher.configure("local[2]", True, env)
    assert env["PYSPARK_PYTHON"] == str(pythonlauncher.LAUNCHER)

    out = subprocess.run([env["PYSPARK_PYTHON"], "-c", PROBE], env=env, capture_output=True,
                         text=True, check=True).stdout  # fmt: skip
    pyspark_file, py4j_file, path = json.loads(out)

    assert Path(pyspark_file).parent == home  # the installed package, bytecode cached
    assert ".zip" not in py4j_file
    assert str(own) in path  # the user's entries stay
    assert not set(spark_pythonpath(home)) & set(path)

    # Without the launcher, the same PYTHONPATH imports the zip (what the test guards against).
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True,
                         text=True, check=True).stdout  # fmt: skip
    assert "pyspark.zip" in json.loads(out)[0]


def test_the_sessions_python_processes_import_the_installed_pyspark(spark: Any) -> None:
    """A worker forked by the pipeline's daemon, and a Python data source's planner."""
    from pyspark.sql.datasource import DataSource
    from pyspark.sql.types import StringType, StructField, StructType

    def imported(_: Any) -> tuple[str, list[str]]:
        import pyspark

        return pyspark.__file__, list(sys.path)

    home = pythonlauncher.installed_pyspark()
    [(worker_file, worker_path)] = spark.sparkContext.parallelize([0], 1).map(imported).collect()
    assert Path(worker_file).parent == home
    assert not set(spark_pythonpath(home)) & set(worker_path)

    class LauncherProbe(DataSource):
        """Names the file its planner imported PySpark from, as its one column."""

        @classmethod
        def name(cls) -> str:
            return "lv_launcher_probe"

        def schema(self) -> StructType:
            import pyspark

            return StructType([StructField(pyspark.__file__, StringType())])

    spark.dataSource.register(LauncherProbe)
    [planner_file] = spark.read.format("lv_launcher_probe").load().schema.names
    assert Path(planner_file).parent == home


def test_only_local_mode_and_the_pipelines_own_interpreter_use_it() -> None:
    env: dict[str, str] = {}
    assert not pythonlauncher.configure("spark://master:7077", True, env)
    assert env == {"PYSPARK_PYTHON": sys.executable}

    env = {"PYSPARK_PYTHON": "/opt/other/bin/python3"}
    assert not pythonlauncher.configure("local[2]", True, env)
    assert env == {"PYSPARK_PYTHON": "/opt/other/bin/python3"}

    env = {"PYSPARK_PYTHON": sys.executable}
    assert pythonlauncher.configure("local[2]", True, env)
    assert env["PYSPARK_PYTHON"] == str(pythonlauncher.LAUNCHER)
    assert env[pythonlauncher.PYTHON] == sys.executable

    # Turned off in a process that inherited the launcher: this interpreter, as Spark runs it.
    assert not pythonlauncher.configure("local[2]", False, env)
    assert env["PYSPARK_PYTHON"] == sys.executable


def test_the_setting_is_on_or_off() -> None:
    base = {"LV_DATA_DIR": "/tmp/lv-unused"}
    assert Settings.from_env(base).python_launcher
    assert not Settings.from_env({**base, "LV_PYTHON_LAUNCHER": "off"}).python_launcher
    with pytest.raises(ConfigurationError, match="LV_PYTHON_LAUNCHER must be on or off"):
        Settings.from_env({**base, "LV_PYTHON_LAUNCHER": "sometimes"})
