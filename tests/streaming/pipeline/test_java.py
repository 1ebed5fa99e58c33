"""The Java the pipeline checks is the one Spark's launcher runs: JAVA_HOME first, then PATH."""

from __future__ import annotations

from pathlib import Path

import pytest

from liveviews.errors import LiveviewsError
from liveviews.pipeline.java import java_binary, java_major, require_java


def test_java_home_is_checked_before_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("JAVA_HOME", str(tmp_path))  # a home with no bin/java in it
    assert java_binary() is None
    with pytest.raises(LiveviewsError) as refused:
        require_java()
    assert refused.value.code == "java_missing"
    assert "JAVA_HOME" in refused.value.message


def test_the_installed_java_is_17_or_newer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JAVA_HOME", raising=False)
    found = java_binary()
    assert found is not None
    monkeypatch.setenv("JAVA_HOME", str(found.parent.parent))
    assert java_binary() == found
    major = java_major()
    assert major is not None and major >= 17
    require_java()
