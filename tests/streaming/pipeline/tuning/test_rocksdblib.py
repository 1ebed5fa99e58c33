"""RocksDB's native library, extracted once and loaded from there, not copied to /tmp per start."""

from __future__ import annotations

import hashlib
import os
import zipfile
from pathlib import Path
from typing import Any

import pytest

from liveviews.pipeline.session import spark_conf
from liveviews.pipeline.settings import Settings
from liveviews.pipeline.tuning import rocksdblib


def settings(**env: str) -> Settings:
    return Settings.from_env({"LV_DATA_DIR": "/tmp/lv-unused", "LV_CLASS_ARCHIVE": "off", **env})


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_the_pipelines_jvm_maps_rocksdb_from_the_extracted_library(spark: Any) -> None:
    jvm = spark._jvm
    jvm.org.rocksdb.RocksDB.loadLibrary()  # what Spark's state stores call; loads at most once
    pid = jvm.java.lang.ProcessHandle.current().pid()
    with open(f"/proc/{pid}/maps") as maps:
        mapped = {line.split()[-1] for line in maps if "rocksdbjni" in line}
    directory, name = rocksdblib.library_dir(), rocksdblib.library_name()
    assert directory is not None and name is not None
    # Not a copy RocksDB's loader made in the temporary directory, which a killed JVM leaves.
    assert mapped == {str(directory / name)}


def test_the_library_is_extracted_whole_once_per_rocksdb_jar(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    directory = rocksdblib.ensure_library()
    jar, name = rocksdblib.rocksdb_jar(), rocksdblib.library_name()
    assert directory is not None and jar is not None and name is not None
    assert directory.parent == tmp_path / "liveviews"
    assert directory.name.startswith("rocksdbjni-")
    with zipfile.ZipFile(jar) as archive:
        expected = sha256(archive.read(name))
    extracted = directory / name
    assert sha256(extracted.read_bytes()) == expected
    assert [p.name for p in directory.iterdir()] == [name]  # nothing half-written left
    written = extracted.stat().st_mtime_ns
    assert rocksdblib.ensure_library() == directory
    assert extracted.stat().st_mtime_ns == written  # extracted once
    assert spark_conf(settings())[rocksdblib.LIBRARY_PATH] == str(directory)


def test_a_failed_extraction_leaves_nothing_and_rocksdb_loads_its_own(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(rocksdblib, "library_name", lambda: "librocksdbjni-nowhere.so")
    assert rocksdblib.ensure_library() is None  # the jar holds no such member
    directory = rocksdblib.library_dir()
    assert directory is not None and list(directory.iterdir()) == []
    assert rocksdblib.LIBRARY_PATH not in spark_conf(settings())


def test_an_unknown_platform_keeps_rocksdbs_own_loading(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rocksdblib.platform, "machine", lambda: "riscv64")
    assert rocksdblib.library_name() is None
    assert rocksdblib.library_dir() is None and rocksdblib.ensure_library() is None
    assert rocksdblib.LIBRARY_PATH not in spark_conf(settings())


def test_the_library_path_is_set_in_local_mode_only_and_keeps_the_users() -> None:
    directory = rocksdblib.ensure_library()
    assert directory is not None
    assert rocksdblib.spark_conf("local[2]", directory) == {rocksdblib.LIBRARY_PATH: str(directory)}
    assert rocksdblib.spark_conf("spark://master:7077", directory) == {}
    conf = spark_conf(settings(LV_SPARK_CONF_spark__driver__extraLibraryPath="/opt/native"))
    assert conf[rocksdblib.LIBRARY_PATH] == f"{directory}{os.pathsep}/opt/native"
    cluster = spark_conf(settings(SPARK_MASTER="spark://master:7077"))
    assert rocksdblib.LIBRARY_PATH not in cluster


def extracted(cache: Path, key: str, jar: Path | None) -> Path:
    """A directory as an earlier start extracted it, from ``jar`` (None: not recorded)."""
    directory = cache / f"rocksdbjni-{key}"
    directory.mkdir(parents=True)
    (directory / "librocksdbjni-linux64.so").write_bytes(b"\0" * 16)
    if jar is not None:
        rocksdblib.source_file(directory).write_text(str(jar))
    return directory


def test_a_start_removes_the_libraries_of_jars_that_are_gone_or_replaced(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    cache = tmp_path / "liveviews"
    jar = rocksdblib.rocksdb_jar()
    assert jar is not None
    other_install = tmp_path / "other-venv" / "rocksdbjni-9.0.jar"
    other_install.parent.mkdir()
    other_install.write_bytes(b"a jar")
    kept = extracted(cache, "0ther1nstall", other_install)
    gone = extracted(cache, "de1etedc1one", tmp_path / "deleted-venv" / "rocksdbjni-9.0.jar")
    replaced = extracted(cache, "bef0reupgrade", jar)  # this jar, before pyspark was reinstalled
    unrecorded = extracted(cache, "unrec0rded00", None)
    directory = rocksdblib.ensure_library()
    assert directory is not None and rocksdblib.library_name() in {
        p.name for p in directory.iterdir()
    }
    assert rocksdblib.source_file(directory).read_text() == str(jar)
    assert kept.is_dir() and rocksdblib.source_file(kept).is_file()
    for stale in (gone, replaced, unrecorded):
        assert not stale.exists() and not rocksdblib.source_file(stale).exists(), stale
    assert sorted(p.name for p in cache.iterdir()) == sorted(
        [kept.name, f"{kept.name}.source", directory.name, f"{directory.name}.source"]
    )
