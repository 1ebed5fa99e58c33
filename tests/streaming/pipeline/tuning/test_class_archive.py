"""The pipeline's JVM class archive: which options the driver gets, and that the archive built by
``scripts/setup.sh`` (or ``scripts/test.sh``) is one the running JVM maps."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from liveviews.pipeline.java import java_binary
from liveviews.pipeline.session import DRIVER_JIT_OPTIONS, spark_conf
from liveviews.pipeline.settings import Settings
from liveviews.pipeline.tuning import classarchive

QUIET = ["-Xlog:cds=off", "-Xlog:cds+dynamic=off"]


def settings(**env: str) -> Settings:
    return Settings.from_env({"LV_DATA_DIR": "/tmp/lv-unused", **env})


def test_an_existing_archive_is_mapped(tmp_path: Path) -> None:
    archive = tmp_path / "classes.jsa"
    archive.write_bytes(b"x")
    assert classarchive.java_options(settings(LV_CLASS_ARCHIVE=str(archive))) == [
        f"-XX:SharedArchiveFile={archive}",
        *QUIET,
    ]


def test_a_missing_archive_or_off_gives_no_option(tmp_path: Path) -> None:
    assert classarchive.java_options(settings(LV_CLASS_ARCHIVE=str(tmp_path / "none"))) == []
    assert classarchive.java_options(settings(LV_CLASS_ARCHIVE="off")) == []


def test_the_builder_s_run_writes_the_archive_at_exit(tmp_path: Path) -> None:
    dump = tmp_path / "new.jsa"
    options = classarchive.java_options(settings(LV_CLASS_ARCHIVE_DUMP=str(dump)))
    assert options == [f"-XX:ArchiveClassesAtExit={dump}", *QUIET]


def test_a_path_with_a_space_stays_one_option(tmp_path: Path) -> None:
    archive = tmp_path / "my classes.jsa"
    archive.write_bytes(b"x")
    assert classarchive.java_options(settings(LV_CLASS_ARCHIVE=str(archive)))[0] == (
        f'"-XX:SharedArchiveFile={archive}"'
    )


def test_the_driver_options_keep_the_time_zone_and_jit_options_beside_the_archive(
    tmp_path: Path,
) -> None:
    archive = tmp_path / "classes.jsa"
    archive.write_bytes(b"x")
    options = spark_conf(settings(LV_CLASS_ARCHIVE=str(archive)))["spark.driver.extraJavaOptions"]
    assert options.split() == [
        "-Duser.timezone=UTC", *DRIVER_JIT_OPTIONS, f"-XX:SharedArchiveFile={archive}", *QUIET,
    ]  # fmt: skip
    assert spark_conf(settings(LV_CLASS_ARCHIVE="off"))["spark.driver.extraJavaOptions"] == (
        " ".join(["-Duser.timezone=UTC", *DRIVER_JIT_OPTIONS])
    )


def test_the_default_archive_is_named_after_the_jars_and_the_jdk(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    path = classarchive.default_path()
    java = java_binary()
    assert path is not None and java is not None
    assert path.parent == tmp_path / "liveviews"
    assert path.name.startswith("spark-classes-") and path.suffix == ".jsa"
    assert path == classarchive.archive_for(classarchive.spark_jars(), java)
    # Another virtualenv's jars are another class path, which this archive cannot map.
    other_jars = tmp_path / "other-venv" / "jars"
    other_jars.mkdir(parents=True)
    assert classarchive.archive_for(other_jars, java) != path
    assert classarchive.archive_for(classarchive.spark_jars(), tmp_path / "java") != path


def archive_cache(cache: Path, built_over: dict[str, Path | None]) -> dict[str, Path]:
    """``cache`` with a default archive per name, each recorded as built over its jars
    (None: built before the jars were recorded)."""
    cache.mkdir()
    archives = {}
    for name, jars in built_over.items():
        archive = cache / f"spark-classes-{name}.jsa"
        archive.write_bytes(b"archive")
        if jars is not None:
            classarchive.source_file(archive).write_text(f"{jars}\n")
        archives[name] = archive
    return archives


def test_archives_whose_jars_are_gone_are_pruned(tmp_path: Path) -> None:
    live_jars, gone_jars = tmp_path / "live" / "jars", tmp_path / "gone" / "jars"
    live_jars.mkdir(parents=True)
    cache = tmp_path / "cache"
    archives = archive_cache(cache, {"live": live_jars, "gone": gone_jars, "unrecorded": None})
    unrelated = cache / "notes.txt"
    unrelated.write_text("kept")

    assert classarchive.prune(cache) == [archives["gone"], archives["unrecorded"]]
    assert sorted(p.name for p in cache.iterdir()) == [
        "notes.txt", "spark-classes-live.jars", "spark-classes-live.jsa",
    ]  # fmt: skip


def test_a_new_archive_supersedes_older_ones_over_the_same_jars(tmp_path: Path) -> None:
    ours, other = tmp_path / "ours" / "jars", tmp_path / "other" / "jars"
    ours.mkdir(parents=True)
    other.mkdir(parents=True)
    cache = tmp_path / "cache"
    archives = archive_cache(cache, {"old": ours, "new": ours, "other": other})

    assert classarchive.prune(cache, current=archives["new"]) == [archives["old"]]
    assert sorted(p.name for p in cache.glob("*.jsa")) == [
        "spark-classes-new.jsa", "spark-classes-other.jsa",
    ]  # fmt: skip
    assert not classarchive.source_file(archives["old"]).exists()


def test_bad_arguments_get_the_usage(capsys: pytest.CaptureFixture[str]) -> None:
    assert classarchive.main(["--now"]) == 2
    assert "usage: python -m liveviews.pipeline.tuning.classarchive" in capsys.readouterr().err


def test_prepare_checks_the_application_then_the_archive(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``python -m liveviews.pipeline --prepare``, which ``scripts/run.sh`` runs before the pipeline."""
    from liveviews.pipeline.__main__ import main

    monkeypatch.setenv("LV_CLASS_ARCHIVE", "off")
    assert main(["--prepare"]) == 0
    assert "The class archive is turned off" in capsys.readouterr().out
    monkeypatch.setenv("LV_APP", "nowhere:app")
    assert main(["--prepare"]) == 2  # a bad application stops it before the archive
    out, err = capsys.readouterr()
    assert "LV_APP='nowhere:app' does not name an application" in err
    assert "class archive" not in out
    usage = "usage: python -m liveviews.pipeline [--check | --prepare | --build PIPELINE@VERSION]"
    assert main(["--prepare", "--check"]) == 2
    assert usage in capsys.readouterr().err
    assert main(["--build", "entities"]) == 2  # a version is named PIPELINE@VERSION
    assert usage in capsys.readouterr().err


def test_prepare_starts_without_an_archive_it_cannot_make(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from liveviews.pipeline.__main__ import main

    def unwritable_cache(argv: list[str]) -> int:
        raise PermissionError(13, "Permission denied", "/root/.cache/liveviews")

    monkeypatch.setattr(classarchive, "main", unwritable_cache)
    assert main(["--prepare"]) == 0
    err = capsys.readouterr().err
    assert "Could not prepare the class archive: [Errno 13] Permission denied" in err
    assert "Starting without the class archive." in err


def test_an_application_without_samples_starts_without_an_archive_and_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An application of the user's own need not declare samples: its first start said it
    "could not build the class archive", as if something were broken."""
    (tmp_path / "plain.py").write_text("from liveviews import App\napp = App('plain')\n")
    monkeypatch.setenv("LV_APP_DIR", str(tmp_path))
    monkeypatch.setenv("LV_APP", "plain:app")
    monkeypatch.setenv("LV_CLASS_ARCHIVE", str(tmp_path / "archive.jsa"))
    assert classarchive.main([]) == 0
    out, err = capsys.readouterr()
    assert "the application declares no samples" in out and err == ""
    assert not (tmp_path / "archive.jsa").exists()


def test_the_pipeline_jvm_maps_the_class_archive(spark: Any) -> None:
    path = classarchive.archive_path(Settings.from_env(dict(os.environ)))
    assert path is not None and path.is_file(), "scripts/test.sh builds the archive first"
    runtime = spark._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
    arguments = list(runtime.getInputArguments())
    assert f"-XX:SharedArchiveFile={path}" in arguments
    assert set(DRIVER_JIT_OPTIONS) <= set(arguments)  # the JVM accepted the JIT thresholds
    java = java_binary()
    assert java is not None

    def maps(class_path: str) -> subprocess.CompletedProcess[str]:
        # -Xshare:on: the JVM refuses to start unless the archive maps over this class path.
        command = [str(java), "-Xshare:on", f"-XX:SharedArchiveFile={path}", "-cp", class_path,
                   "-version"]  # fmt: skip
        return subprocess.run(command, capture_output=True, text=True, timeout=60)

    same = maps(runtime.getClassPath())
    assert same.returncode == 0, same.stderr
    other = maps(str(Path(path).parent))
    assert other.returncode != 0 and "shared class paths mismatch" in other.stderr
