"""The driver JVM's logging: Spark's routine lines in the pipeline's log file, errors on the console.

Spark warns once for every new key of a stateful operator, and those lines buried the console
of ``make run``. The driver now logs through ``streaming/pipeline/log4j2.properties``: WARN lines go
to ``$LV_DATA_DIR/logs/pipeline.log``, only errors reach the console (the driver's stdout, since
its stderr goes to that file too), and ``LV_LOG_LEVEL=debug`` shows them all. Each case starts
its own driver in a subprocess, since a process holds only one SparkSession.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

SCRIPT = textwrap.dedent(
    """
    from liveviews.pipeline.settings import Settings
    from liveviews.pipeline.session import build_session

    spark = build_session(Settings.from_env())
    jvm = spark._jvm
    logger = jvm.org.apache.logging.log4j.LogManager.getLogger("io.liveviews.Probe")
    logger.info("an info line")
    logger.warn("a routine warning")
    logger.error("a failure", jvm.java.lang.IllegalStateException("the cause"))
    spark.stop()
    """
)


def run_driver(tmp_path: Path, **env: str) -> tuple[subprocess.CompletedProcess[str], str]:
    """Runs SCRIPT's driver; returns the process and its log file's text."""
    given = {k: v for k, v in os.environ.items() if not k.startswith(("LV_", "HONCHO_"))}
    given.update({"LV_DATA_DIR": str(tmp_path), "SPARK_MASTER": "local[1]", **env})
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        cwd=ROOT, env=given, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    log_file = tmp_path / "logs" / "pipeline.log"
    return proc, log_file.read_text() if log_file.exists() else ""


def test_a_spark_warning_goes_to_the_log_file_and_an_error_to_the_console(
    tmp_path: Path,
) -> None:
    proc, logged = run_driver(tmp_path)
    assert "WARN Probe: a routine warning" in logged
    assert "ERROR Probe: a failure" in logged
    assert "at " in logged.split("the cause", 1)[1], "the file keeps the error's trace"
    assert "an info line" not in logged
    assert "a routine warning" not in proc.stdout + proc.stderr
    console = proc.stdout.splitlines()
    # The error and its first line on the console, without the trace.
    assert "ERROR Probe: a failure" in console
    assert "java.lang.IllegalStateException: the cause" in console
    assert not [line for line in console if line.lstrip().startswith("at ")]
    assert "WARN" not in proc.stderr


def test_with_debug_spark_shows_its_info_lines_on_the_console(tmp_path: Path) -> None:
    proc, logged = run_driver(tmp_path, LV_LOG_LEVEL="debug")
    assert "INFO Probe: an info line" in proc.stdout
    assert "WARN Probe: a routine warning" in proc.stdout
    assert "a routine warning" in logged


def test_the_users_own_jvm_options_win(tmp_path: Path) -> None:
    """The user's ``-D`` options come after the pipeline's logging options."""
    user = "-Dliveviews.log.console=warn -Dliveviews.log.level=info"
    proc, logged = run_driver(tmp_path, LV_SPARK_CONF_spark__driver__extraJavaOptions=user)
    assert "WARN Probe: a routine warning" in proc.stdout
    assert "INFO Probe: an info line" in logged
