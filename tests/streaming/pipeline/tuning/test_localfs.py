"""Checkpoint files through a local file system that starts no chmod process per file."""

from __future__ import annotations

import os
import stat
import zipfile
from pathlib import Path
from typing import Any

import pytest

from liveviews.pipeline.realtime import jar as realtime_jar
from liveviews.pipeline.session import spark_conf
from liveviews.pipeline.settings import Settings
from liveviews.pipeline.tuning import localfs


def settings(**env: str) -> Settings:
    return Settings.from_env({"LV_DATA_DIR": "/tmp/lv-unused", "LV_CLASS_ARCHIVE": "off", **env})


def test_the_classes_compile_into_a_jar_named_after_their_sources(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    jar = localfs.ensure_jar()
    assert jar is not None and jar == localfs.jar_path()
    assert jar.parent == tmp_path / "liveviews" and jar.name.startswith("localfs-")
    with zipfile.ZipFile(jar) as classes:
        assert sorted(classes.namelist()) == [
            "io/liveviews/hadoop/NioLocalFileSystem.class",
            "io/liveviews/hadoop/NioRawLocalFileSystem.class",
        ]
    assert [p.name for p in jar.parent.iterdir()] == [jar.name]  # nothing half-written left
    assert localfs.ensure_jar() == jar  # built once


def test_without_javac_the_pipeline_keeps_hadoops_file_system(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(localfs, "javac_binary", lambda: None)
    assert localfs.ensure_jar() is None
    assert "spark.hadoop.fs.file.impl" not in spark_conf(settings())


def test_the_file_system_is_set_in_local_mode_only(tmp_path: Path) -> None:
    jar = tmp_path / "localfs.jar"
    jar.write_bytes(b"")
    assert localfs.spark_conf("local[2]", jar) == {
        "spark.hadoop.fs.file.impl": localfs.FILE_SYSTEM_CLASS,
        "spark.driver.extraClassPath": str(jar),
    }
    assert localfs.spark_conf("spark://master:7077", jar) == {}
    assert localfs.spark_conf("local[2]", tmp_path / "missing.jar") == {}


def test_the_users_class_path_is_added_to_the_jar() -> None:
    jar = localfs.ensure_jar()
    assert jar is not None
    realtime = realtime_jar.ensure_jar()  # the Real-Time Mode jar comes between them
    conf = spark_conf(settings(LV_SPARK_CONF_spark__driver__extraClassPath="/opt/extra.jar"))
    assert conf["spark.driver.extraClassPath"] == os.pathsep.join(
        [str(jar), str(realtime), "/opt/extra.jar"]
    )


def test_the_pipeline_writes_local_files_with_their_permissions_in_process(
    spark: Any, tmp_path: Path
) -> None:
    jvm = spark._jvm
    conf = spark._jsc.hadoopConfiguration()
    fs = jvm.org.apache.hadoop.fs.FileSystem.getLocal(conf)
    assert fs.getClass().getName() == localfs.FILE_SYSTEM_CLASS
    assert fs.getRaw().getClass().getName() == "io.liveviews.hadoop.NioRawLocalFileSystem"

    path = jvm.org.apache.hadoop.fs.Path(str(tmp_path / "0"))
    permission = jvm.org.apache.hadoop.fs.permission.FsPermission(0o640)
    out = fs.create(path, permission, True, 4096, 1, 1 << 20, None)
    out.write(b"v1")
    out.close()
    assert (tmp_path / "0").read_bytes() == b"v1"
    assert stat.S_IMODE((tmp_path / "0").stat().st_mode) == 0o640
    assert (tmp_path / ".0.crc").is_file()  # still Hadoop's checksummed file system
    fs.setPermission(path, jvm.org.apache.hadoop.fs.permission.FsPermission(0o604))
    assert stat.S_IMODE((tmp_path / "0").stat().st_mode) == 0o604
