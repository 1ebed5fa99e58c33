"""Spark's jars, which the start-up tuning names its cached files after (``liveviews.cache``).

Each cached file is named after what it was made from (a jar's path and modification time), so
an upgrade of pyspark or of the JDK makes a new one, and a record beside it says which jars it
came from, so the next build can remove what no installation uses any more.
"""

from __future__ import annotations

from pathlib import Path


def spark_jars() -> Path:
    """The directory of Spark's jars, which is the driver JVM's class path."""
    import pyspark

    return (Path(pyspark.__file__).parent / "jars").resolve()


def spark_jar(prefix: str) -> Path | None:
    """The newest of Spark's jars whose name starts with ``prefix``, such as ``rocksdbjni-``."""
    found = sorted(spark_jars().glob(f"{prefix}*.jar"))
    return found[-1] if found else None


def jar_stamp(jar: Path) -> str:
    """What names a jar in a cache key: its path and modification time."""
    return f"{jar}|{mtime(jar)}"


def mtime(path: Path) -> int:
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return 0


def recorded_path(record: Path) -> Path | None:
    """The path a cache entry's ``record`` names (what it was made from); None when it has no
    record (made before records were kept)."""
    try:
        return Path(record.read_text().strip())
    except OSError:
        return None
