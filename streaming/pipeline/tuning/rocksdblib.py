"""RocksDB's native library, extracted once per installation of pyspark rather than at every
start of the pipeline.

Spark's state stores reach RocksDB through JNI. Unless the library is on the JVM's library
path, RocksDB's loader copies it (~15 MB) out of its jar into the temporary directory at every
JVM start, and deletes the copy only when the JVM exits normally: a pipeline that is killed
(SIGKILL, the kernel's OOM killer, a supervisor's hard stop) leaves its copy behind, one per
start. The pipeline extracts the library once under ``~/.cache/liveviews`` and, in local mode,
puts that directory on the driver's library path (``spark.driver.extraLibraryPath``), where
RocksDB's loader looks first. On a cluster, executors load RocksDB as Spark ships it.

Platforms whose library this module does not name (other than glibc Linux on x86-64 or
AArch64) keep RocksDB's own loading.

Each extracted directory has the path of its jar recorded beside it; a start removes the
directories whose jar is gone (a deleted virtualenv or clone) or was replaced (an upgrade of
pyspark), as the class archive's are (``liveviews.pipeline.tuning.classarchive.prune``).
"""

from __future__ import annotations

import hashlib
import logging
import os
import platform
import shutil
import tempfile
import zipfile
from pathlib import Path

from liveviews.cache import cache_dir
from liveviews.pipeline.tuning.jars import jar_stamp, recorded_path, spark_jar

log = logging.getLogger("liveviews.rocksdblib")

LIBRARY_PATH = "spark.driver.extraLibraryPath"
_NAMES = {"x86_64": "librocksdbjni-linux64.so", "aarch64": "librocksdbjni-linux-aarch64.so"}


def library_name() -> str | None:
    """The file name RocksDB's loader asks the JVM for on this platform, if this module knows it."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return None
    return _NAMES.get(platform.machine())


def rocksdb_jar() -> Path | None:
    return spark_jar("rocksdbjni-")


def _located() -> tuple[Path, str, Path] | None:
    """RocksDB's jar, the library's name in it and the directory it is extracted to."""
    jar, name = rocksdb_jar(), library_name()
    if jar is None or name is None:
        return None
    key = hashlib.sha256(jar_stamp(jar).encode()).hexdigest()[:12]
    return jar, name, cache_dir() / f"rocksdbjni-{key}"


def library_dir() -> Path | None:
    """``~/.cache/liveviews/rocksdbjni-<key>``, the key naming RocksDB's jar; None when this
    platform's library is not known or Spark ships no RocksDB."""
    located = _located()
    return None if located is None else located[2]


def source_file(directory: Path) -> Path:
    """Beside each extracted directory: the path of the jar it was extracted from."""
    return directory.with_name(directory.name + ".source")


def ensure_library() -> Path | None:
    """The directory holding the extracted library, extracting it on first use; None when it
    cannot be had (logged: RocksDB then loads as it would without this module). Removes the
    directories of jars that are gone or replaced."""
    located = _located()
    if located is None:
        return None
    jar, name, directory = located
    try:
        # Recorded before the extraction: another installation's start keeps it meanwhile.
        source = source_file(directory)
        if not source.is_file():
            directory.parent.mkdir(parents=True, exist_ok=True)
            source.write_text(str(jar))
        for stale in prune(directory.parent, directory, jar):
            log.info("removed %s, extracted from a jar that is gone or replaced", stale)
    except OSError as exc:
        log.warning("could not record or prune RocksDB's extracted libraries (%s)", exc)
    if (directory / name).is_file():
        return directory
    partial: Path | None = None
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(jar) as archive, archive.open(name) as member:
            fd, tmp = tempfile.mkstemp(dir=directory, prefix=".extract-")
            partial = Path(tmp)
            with os.fdopen(fd, "wb") as out:
                shutil.copyfileobj(member, out, 1 << 20)
        # One rename: a concurrent start sees the whole library or none of it.
        os.replace(partial, directory / name)
    except (OSError, KeyError, zipfile.BadZipFile) as exc:
        if partial is not None:
            partial.unlink(missing_ok=True)
        log.warning("could not extract RocksDB's library (%s); RocksDB extracts its own", exc)
        return None
    return directory


def prune(cache: Path, current: Path, jar: Path) -> list[Path]:
    """Remove the extracted directories in ``cache`` other than ``current`` whose jar is gone,
    is ``jar`` (extracted before it was replaced), or was never recorded; returns them."""
    removed = []
    for directory in sorted(cache.glob("rocksdbjni-*")):
        if directory == current or not directory.is_dir():
            continue
        source = source_file(directory)
        recorded = recorded_path(source)
        if recorded is None or recorded == jar or not recorded.is_file():
            shutil.rmtree(directory, ignore_errors=True)
            source.unlink(missing_ok=True)
            removed.append(directory)
    return removed


def spark_conf(master: str, directory: Path | None) -> dict[str, str]:
    """The driver's library path, in local mode and once the library is extracted."""
    name = library_name()
    if directory is None or name is None or not master.startswith("local"):
        return {}
    if not (directory / name).is_file():
        return {}
    return {LIBRARY_PATH: str(directory)}
