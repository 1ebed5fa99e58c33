"""Checkpoint files on a local disk without a process started per file.

Pyspark ships no Hadoop native library, and without it Hadoop's local file system sets each new
file's permissions by starting ``chmod``: twice per checkpoint file (the file and its checksum
file), several files per micro-batch. ``streaming/pipeline/tuning/jvm`` holds a local file system
that sets the same bits through Java NIO instead (two small classes over Hadoop's own). They are
compiled once per installation of pyspark into a jar under ``~/.cache/liveviews``; the driver puts
the jar on its class path and uses the class for ``file:`` paths, in local mode only (on a cluster,
checkpoints live on shared storage).

Without ``javac`` (a JRE only) the pipeline runs as before, with Hadoop's own local file system,
which costs ~20 ms per checkpoint file on the reference machine (docs/PERFORMANCE.md).
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
import zipfile
from importlib import resources
from pathlib import Path

from liveviews.cache import cache_dir
from liveviews.pipeline.java import java_binary
from liveviews.pipeline.tuning.jars import jar_stamp, spark_jar

log = logging.getLogger("liveviews.localfs")

FILE_SYSTEM_CLASS = "io.liveviews.hadoop.NioLocalFileSystem"
SOURCES = ("NioRawLocalFileSystem.java", "NioLocalFileSystem.java")
PACKAGE_DIR = "jvm/io/liveviews/hadoop"
COMPILE_TIMEOUT_S = 120


def _sources() -> list[tuple[str, bytes]]:
    package = resources.files("liveviews.pipeline.tuning").joinpath(PACKAGE_DIR)
    return [(name, package.joinpath(name).read_bytes()) for name in SOURCES]


def hadoop_api_jar() -> Path | None:
    """The jar of Hadoop's client API among Spark's jars: what the classes compile against."""
    return spark_jar("hadoop-client-api-")


def jar_path() -> Path | None:
    """``~/.cache/liveviews/localfs-<key>.jar``, the key naming the sources and Hadoop's jar."""
    api = hadoop_api_jar()
    return None if api is None else _jar_for(api)


def _jar_for(api: Path) -> Path:
    digest = hashlib.sha256(jar_stamp(api).encode())
    for name, text in _sources():
        digest.update(name.encode() + b"\0" + text)
    return cache_dir() / f"localfs-{digest.hexdigest()[:12]}.jar"


def javac_binary() -> Path | None:
    """``javac`` beside the ``java`` Spark runs, else the one on PATH."""
    java = java_binary()
    if java is not None and (java.parent / "javac").exists():
        return java.parent / "javac"
    found = shutil.which("javac")
    return Path(found) if found else None


def ensure_jar() -> Path | None:
    """The compiled jar, compiling it on first use; None when it cannot be had (no ``javac``,
    or compiling failed: logged, and the pipeline keeps Hadoop's file system)."""
    api = hadoop_api_jar()
    if api is None:
        return None
    target = _jar_for(api)
    if target.is_file():
        return target
    javac = javac_binary()
    if javac is None:
        log.info("no javac: checkpoint files go through Hadoop's own local file system")
        return None
    try:
        _compile(javac, api, target)
    except (OSError, subprocess.SubprocessError) as exc:
        log.warning("could not compile the local file system (%s); using Hadoop's own", exc)
        return None
    return target


def _compile(javac: Path, api: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".localfs-", dir=target.parent) as tmp:
        work = Path(tmp)
        files = []
        for name, text in _sources():
            (work / name).write_bytes(text)
            files.append(str(work / name))
        classes = work / "classes"
        done = subprocess.run(
            [str(javac), "--release", "17", "-nowarn", "-cp", str(api), "-d", str(classes), *files],
            capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S,
        )  # fmt: skip
        if done.returncode != 0:
            raise subprocess.SubprocessError(done.stderr.strip()[-1000:] or "javac failed")
        built = work / "localfs.jar"
        with zipfile.ZipFile(built, "w") as jar:
            for path in sorted(classes.rglob("*.class")):
                jar.write(path, path.relative_to(classes).as_posix())
        os.replace(built, target)  # one rename: a concurrent start sees all of it or nothing


def spark_conf(master: str, jar: Path | None) -> dict[str, str]:
    """The driver's settings for the jar: in local mode, and only once it is built."""
    if jar is None or not master.startswith("local") or not jar.is_file():
        return {}
    return {
        "spark.hadoop.fs.file.impl": FILE_SYSTEM_CLASS,
        "spark.driver.extraClassPath": str(jar),
    }
