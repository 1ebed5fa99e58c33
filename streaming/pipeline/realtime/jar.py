"""The pipeline's JVM code (``jvm/``): built with Maven once per installation of pyspark.

Spark's Real-Time Mode runs no Python data source, Python sink or ``foreachBatch``, so the log's
source and the change topic's writer for it are Java (``io.liveviews.spark``). They compile
against the Spark the running pyspark ships, so the jar is named after those jars and the
sources, and lives under ``~/.cache/liveviews`` like the other start-up archives; Maven fetches
Jedis from Maven Central into its own repository the first time. ``scripts/setup.sh`` builds it
once; a pipeline that runs a view in Real-Time Mode builds it on first use otherwise.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
from importlib import resources
from importlib.abc import Traversable
from pathlib import Path

from liveviews.cache import cache_dir
from liveviews.errors import LiveviewsError
from liveviews.pipeline.tuning.jars import jar_stamp, spark_jar, spark_jars

log = logging.getLogger("liveviews.realtime")

SOURCE_CLASS = "io.liveviews.spark.LogSource"
WRITER_CLASS = "io.liveviews.spark.ChangeTopicWriter"
BUILD_TIMEOUT_S = 600
JAR_NAME = "liveviews-spark.jar"


def _module() -> Traversable:
    return resources.files("liveviews.pipeline.realtime").joinpath("jvm")


def _sources(module: Traversable) -> list[tuple[str, bytes]]:
    """The pom and every Java file, by path within the module, in a stable order."""
    out = [("pom.xml", module.joinpath("pom.xml").read_bytes())]
    package = module.joinpath("src/main/java/io/liveviews/spark")
    for entry in sorted(package.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".java"):
            out.append((f"src/main/java/io/liveviews/spark/{entry.name}", entry.read_bytes()))
    return out


def jar_path() -> Path | None:
    """``~/.cache/liveviews/realtime-<key>.jar``; None when pyspark ships no Spark SQL jar."""
    sql = spark_jar("spark-sql_")
    if sql is None:
        return None
    digest = hashlib.sha256(jar_stamp(sql).encode())
    for name, text in _sources(_module()):
        digest.update(name.encode() + b"\0" + text)
    return cache_dir() / f"realtime-{digest.hexdigest()[:12]}.jar"


def ensure_jar() -> Path:
    """The built jar, building it first when needed; a ``LiveviewsError`` saying what to
    install when it cannot be built."""
    target = jar_path()
    if target is None:
        raise LiveviewsError(
            "Real-Time Mode needs Spark's SQL jar, and this pyspark installation has none.",
            code="realtime_unavailable",
        )
    if target.is_file():
        return target
    mvn = shutil.which("mvn")
    if mvn is None:
        raise LiveviewsError(
            "Real-Time Mode runs JVM code that is built with Maven, and this machine has no "
            "`mvn`. Install it (Debian: apt-get install maven) or run the pipeline in "
            "micro-batch mode (realtime=False).",
            code="realtime_unavailable",
        )
    _build(Path(mvn), target)
    return target


def _build(mvn: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".realtime-", dir=target.parent) as tmp:
        work = Path(tmp)
        for name, text in _sources(_module()):
            (work / name).parent.mkdir(parents=True, exist_ok=True)
            (work / name).write_bytes(text)
        env = {**os.environ, "PYSPARK_JARS": str(spark_jars())}
        log.info("building the Real-Time Mode jar with Maven (once per pyspark installation)")
        done = subprocess.run(
            [str(mvn), "-q", "-B", "-f", str(work / "pom.xml"), "package"],
            capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, env=env,
        )  # fmt: skip
        built = work / "target" / JAR_NAME
        if done.returncode != 0 or not built.is_file():
            said = (done.stdout + done.stderr).strip()[-2000:]
            raise LiveviewsError(
                f"building the Real-Time Mode jar with Maven failed:\n{said}",
                code="realtime_unavailable",
            )
        os.replace(built, target)  # one rename: a concurrent start sees all of it or nothing


def spark_conf(master: str, jar: Path | None) -> dict[str, str]:
    """The driver's class path entry for the jar, once built. In local mode the tasks run in
    the driver's JVM; on a cluster ``spark.jars`` ships it to the executors too."""
    if jar is None or not jar.is_file():
        return {}
    if master.startswith("local"):
        return {"spark.driver.extraClassPath": str(jar)}
    return {"spark.driver.extraClassPath": str(jar), "spark.jars": str(jar)}


if __name__ == "__main__":  # scripts/setup.sh: python -m liveviews.pipeline.realtime.jar
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    print(ensure_jar())
