"""What the driver ships to a cluster's executors, and the errors of an executor that cannot
run the pipeline (streaming/pipeline/cluster.py)."""

from __future__ import annotations

import subprocess
import zipfile
from pathlib import Path

import pytest

from liveviews.errors import ConfigurationError
from liveviews.pipeline.cluster import (
    _sees,
    executor_failure,
    pack_code,
    shipped_packages,
)
from liveviews.pipeline.session import PYTHON_DAEMON, spark_conf
from liveviews.pipeline.settings import Settings


def test_the_project_and_the_applications_top_level_package_are_shipped() -> None:
    assert shipped_packages("demo.chirp:app") == ["liveviews", "liveviews.gateway", "demo"]
    assert shipped_packages("notes_app:app") == ["liveviews", "liveviews.gateway", "notes_app"]
    assert shipped_packages("liveviews.examples:app") == ["liveviews", "liveviews.gateway"]


def test_the_shipped_zip_is_what_an_executor_imports(tmp_path: Path, executors_python: Path):
    archive = pack_code(shipped_packages("demo.chirp:app"), tmp_path / "code.zip")
    names = zipfile.ZipFile(archive).namelist()
    assert "liveviews/pipeline/sink.lua" in names and "demo/chirp/__init__.py" in names
    # In a checkout the gateway is another folder (server/); in the zip it is where it is installed.
    assert "liveviews/gateway/fanout/hub.py" in names and len(names) == len(set(names))
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    # The executors' interpreter imports the views' code from the zip and from nowhere else.
    found = subprocess.run(
        [str(executors_python), "-c",
         "import sys; sys.path.insert(1, sys.argv[1]); import demo.chirp, liveviews.pipeline.views;"
         " print(demo.chirp.__file__)", str(archive)],
        cwd=tmp_path, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert found.returncode == 0, found.stderr
    assert found.stdout.strip() == str(archive / "demo" / "chirp" / "__init__.py")


def test_an_application_module_of_its_own_is_shipped_as_one_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    code = tmp_path / "code"
    code.mkdir()
    (code / "notes_app.py").write_text("app = None\n")
    monkeypatch.syspath_prepend(str(code))
    archive = pack_code(shipped_packages("notes_app:app"), tmp_path / "code.zip")
    assert "notes_app.py" in zipfile.ZipFile(archive).namelist()


def test_a_package_that_is_not_importable_cannot_be_shipped(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="'no_such_app' .* not importable"):
        pack_code(["no_such_app"], tmp_path / "code.zip")
    assert list(tmp_path.iterdir()) == []


def test_the_worker_daemon_of_local_mode_is_not_asked_of_executors(tmp_path: Path) -> None:
    """An executor starts its Python daemon before the shipped code is on its path."""

    def conf(master: str) -> dict[str, str]:
        return spark_conf(Settings.from_env({"SPARK_MASTER": master, "LV_DATA_DIR": str(tmp_path)}))

    assert conf("local[2]")[PYTHON_DAEMON] == "liveviews.pipeline.tuning.pydaemon"
    assert PYTHON_DAEMON not in conf("spark://127.0.0.1:7077")


def test_an_executor_sees_the_drivers_file_only_with_its_token(tmp_path: Path) -> None:
    marker = tmp_path / ".shared"
    marker.write_text("token")
    assert _sees(str(marker), "token", 0)[0]
    assert not _sees(str(marker), "other", 0)[0]
    assert not _sees(str(tmp_path / "missing"), "token", 0)[0]


def test_a_module_missing_on_the_executors_says_what_to_install() -> None:
    failure = executor_failure(
        RuntimeError(
            "An error occurred while calling collect.\nTraceback (most recent call last):\n"
            "  File \"worker.py\", line 1\nModuleNotFoundError: No module named 'orjson'\n"
        )
    )
    assert failure.code == "executor_python_incomplete"
    assert "No module named 'orjson'" in failure.message
    assert "PYSPARK_PYTHON" in failure.message
    other = executor_failure(RuntimeError("\nJob aborted: executor lost"))
    assert other.code == "executors_failed" and "Job aborted: executor lost" in other.message
