"""A version's stored code runs again beside the application's current code."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from liveviews.pipeline import code as pipelinecode
from liveviews.pipeline.stored import unpack
from tests.streaming.pipeline.test_versions import _write


@pytest.fixture
def code_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def test_stored_code_runs_the_old_version_beside_the_new_one(code_dir):
    old = _write(code_dir, "vers_b", shape="old")
    packed = pipelinecode.pack(old, "notes", "vers_b.app:app")
    new = _write(code_dir, "vers_b", shape="new")
    again = unpack(packed, "notes_1")
    assert again.pipelines["notes"].build(None) == "old"
    assert new.pipelines["notes"].build(None) == "new"
    assert list(again.views) == ["notes"] and list(again.event_types) == ["note"]
    # Its functions belong to modules of its own, which Spark ships to workers by value.
    assert sys.modules["_lv_notes_1.vers_b.helpers"].shape(None) == "old"
    assert sys.modules["vers_b.helpers"].shape(None) == "new"
