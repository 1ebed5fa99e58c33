"""The Java that Spark's launcher runs for the pipeline's driver, and the version Spark 4 needs."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from liveviews.errors import LiveviewsError


def java_binary() -> Path | None:
    """The ``java`` Spark's launcher runs: ``$JAVA_HOME/bin/java``, else the one on PATH."""
    home = os.environ.get("JAVA_HOME")
    found = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    return Path(found).resolve() if found and Path(found).exists() else None


def java_major() -> int | None:
    java = java_binary()
    if java is None:
        return None
    out = subprocess.run([str(java), "-version"], capture_output=True, text=True).stderr
    for token in out.replace('"', " ").split():
        head = token.split(".")[0]
        if head.isdigit() and token[0].isdigit():
            major = int(head)
            return int(token.split(".")[1]) if major == 1 else major
    return None


def require_java() -> None:
    major = java_major()
    if major is None or major < 17:
        found = "no java (JAVA_HOME or PATH)" if major is None else f"Java {major}"
        raise LiveviewsError(
            f"Spark 4 needs Java 17 or newer, and this machine has {found}. "
            "Install it (Debian: apt-get install openjdk-17-jre-headless) or set JAVA_HOME.",
            code="java_missing",
        )
