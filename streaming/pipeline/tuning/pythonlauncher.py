"""The interpreter Spark starts for the pipeline's Python processes, in local mode.

Spark puts its own zipped copies of PySpark and Py4J, and its spark-core jar, first on the
``PYTHONPATH`` of every Python process it starts (``PythonUtils.sparkPythonPath``): the log
source's planners and its streaming reader, the stateful processors' planner, the daemons
that fork the views' workers, and each forked worker as it imports PySpark's worker. Python
keeps no compiled bytecode for modules it imports from a zip, so each of those processes
compiled PySpark's modules from their source: ~1 s of CPU each on the reference machine,
against ~0.2 s importing the installed package, which pip compiled once. Six of them start one
after another before a new pipeline's first micro-batch (docs/PERFORMANCE.md).

With PySpark installed by pip, ``SPARK_HOME`` is the installed package, and its zip holds the
modules of that very package (and its tests). In local mode, when Spark's Python processes run
the pipeline's own interpreter, Spark starts ``python-launcher.sh`` instead: it leaves those
entries out of ``PYTHONPATH`` and runs the interpreter, whose processes then import the
installed PySpark. A ``SPARK_HOME`` elsewhere (a Spark installation of its own) puts other
paths there, which the launcher keeps; an interpreter named in ``PYSPARK_PYTHON`` other than
the pipeline's runs as named. ``LV_PYTHON_LAUNCHER=off`` starts them as Spark would.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import MutableMapping
from pathlib import Path

from liveviews.config.catalog import LAUNCHER_DROP, LAUNCHER_PYTHON

log = logging.getLogger("liveviews.pythonlauncher")

LAUNCHER = Path(__file__).with_name("python-launcher.sh")
PYTHON = LAUNCHER_PYTHON.name
"""The interpreter the launcher runs."""
DROP = LAUNCHER_DROP.name
"""The ``PYTHONPATH`` entries it leaves out, ``:``-separated."""


def spark_copies(home: Path) -> list[str]:
    """What Spark adds to its Python processes' ``PYTHONPATH`` for the PySpark installed at
    ``home``: its zips under ``python/lib`` and the spark-core jar, which holds no Python."""
    found = [*sorted((home / "python" / "lib").glob("*.zip"))]
    found += sorted((home / "jars").glob("spark-core_*.jar"))
    return [str(path) for path in found]


def installed_pyspark() -> Path:
    import pyspark

    # Resolved, as PySpark resolves SPARK_HOME when it starts Spark (find_spark_home).
    return Path(pyspark.__file__).resolve().parent


def runs_this_interpreter(python: str | None) -> bool:
    """Whether ``PYSPARK_PYTHON`` leaves Spark's Python processes to this interpreter (unset,
    this interpreter's path, or the launcher, which runs it)."""
    if not python:
        return True
    path = os.path.abspath(python)
    return path in (os.path.abspath(sys.executable), str(LAUNCHER))


def configure(master: str, enabled: bool, env: MutableMapping[str, str] = os.environ) -> bool:
    """Sets ``PYSPARK_PYTHON`` (and what the launcher reads) in ``env``, which the driver's
    JVM inherits when it starts, so that Spark's Python processes start through the launcher;
    returns whether they will. Otherwise ``PYSPARK_PYTHON`` defaults to this interpreter."""
    chosen = env.get("PYSPARK_PYTHON")
    if not enabled or not master.startswith("local") or not runs_this_interpreter(chosen):
        if chosen == str(LAUNCHER):
            env["PYSPARK_PYTHON"] = sys.executable
        env.setdefault("PYSPARK_PYTHON", sys.executable)
        return False
    if not os.access(LAUNCHER, os.X_OK):
        log.warning("%s is not executable; Spark's Python processes import its zip", LAUNCHER)
        env["PYSPARK_PYTHON"] = sys.executable
        return False
    env["PYSPARK_PYTHON"] = str(LAUNCHER)
    env[PYTHON] = sys.executable
    env[DROP] = os.pathsep.join(spark_copies(installed_pyspark()))
    return True
