"""Pipeline versions: the rule that derives them from code, the stored code that runs an old
version beside the new one, and the registry's transitions in a real store."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

from liveviews.app import load_app
from liveviews.changes.topic import ACTIVE_KEY, FRONTIER_KEY, live_key
from liveviews.errors import ConfigurationError
from liveviews.pipeline import code as pipelinecode
from liveviews.pipeline import versions

MODULE = """
from liveviews import App, Schema, String
from {package}.helpers import shape

app = App("tiny")
app.event_type("note", Schema({{"user": String()}}), lambda p: p["user"])
app.view("notes")
app.view("others")


def unrelated():
    return {unrelated!r}


@app.pipeline("notes", views=["notes"])
def notes(events):
    return shape(events)


@app.pipeline("others", views=["others"]{declared})
def others(events):
    return events
"""
HELPERS = """
def shape(events):
    return {shape!r}
"""


def _write(root: Path, package: str, shape: str = "a", unrelated: str = "x",
           declared: str = "") -> Any:  # fmt: skip
    pkg = root / package
    pkg.mkdir(exist_ok=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "app.py").write_text(MODULE.format(package=package, unrelated=unrelated,
                                              declared=declared))  # fmt: skip
    (pkg / "helpers.py").write_text(HELPERS.format(shape=shape))
    for name in [n for n in sys.modules if n == package or n.startswith(package + ".")]:
        del sys.modules[name]
    return load_app(f"{package}.app:app")


@pytest.fixture
def code_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def test_a_version_changes_with_the_code_the_pipeline_reaches_and_only_with_it(code_dir):
    first = _write(code_dir, "vers_a")
    v1 = pipelinecode.derive(first, "notes")
    assert len(v1) == 12 and v1 == pipelinecode.derive(_write(code_dir, "vers_a"), "notes")
    assert pipelinecode.derive(_write(code_dir, "vers_a", unrelated="y"), "notes") == v1
    assert pipelinecode.derive(_write(code_dir, "vers_a", shape="b"), "notes") != v1
    declared = _write(code_dir, "vers_a", declared=', version="v7"')
    assert pipelinecode.derive(declared, "others") == "v7"


def test_the_registry_builds_switches_and_aborts_in_the_store(store):
    reg = versions.register(store, "notes", "aaa", b"{}")
    assert reg.active is not None and reg.active.namespace == "" and reg.next is None
    assert versions.register(store, "notes", "bbb").active == reg.active  # first one stays
    with pytest.raises(ConfigurationError, match="no version being built"):
        versions.ask(store, "notes", "switch")
    reg = versions.begin(store, "notes", "bbb", "bbb", b"{}")
    assert reg.next is not None and reg.next.qualified("notes") == "notes@bbb"
    assert versions.read_code(store, "notes", reg.next) == b"{}"
    store.hset(FRONTIER_KEY, "notes@bbb", '{"0": "5-0"}')
    before = store.xlen("lv:{m}:progress")
    reg = versions.switch(store, "notes", 4)
    assert reg.active is not None and reg.active.version == "bbb" and reg.next is None
    assert [r.version for r in reg.retired] == ["aaa"] and reg.retired[0].ended
    assert store.hget(ACTIVE_KEY, "notes") == b"@bbb"
    assert {store.hget(live_key(s), "notes") for s in range(4)} == {b"@bbb"}
    entries = [e for _, e in store.xrange("lv:{m}:progress")][before:]
    assert [(e[b"pipeline"], e[b"frontier"]) for e in entries] == [
        (b"notes@bbb", b'{"0": "5-0"}'),  # wakes each gateway with the new version's frontier
        (b"liveviews", b'{"0":"5-0"}'),  # every view's frontier moves with the switch
    ]
    assert store.hget(FRONTIER_KEY, "liveviews") == b'{"0":"5-0"}'

    versions.begin(store, "notes", "ccc", "ccc")
    versions.ask(store, "notes", "abort")
    assert versions.take_request(store, "notes") == "abort"
    assert versions.take_request(store, "notes") is None
    dropped = versions.abort(store, "notes")
    assert dropped is not None and dropped.version == "ccc"
    reg = versions.read(store, "notes")
    assert reg is not None and reg.next is None and reg.aborted == "ccc"
    assert store.hget(ACTIVE_KEY, "notes") == b"@bbb"  # readers never moved
    versions.forget(store, "notes", reg.retired[0])
    assert [r.version for r in versions.read(store, "notes").retired] == ["ccc"]


def test_event_ids_carry_the_version_readers_were_served():
    assert versions.composite_epoch("5f3a9c0e12ab", "") == "5f3a9c0e12ab"
    assert versions.composite_epoch("5f3a9c0e12ab", "@v2") == "5f3a9c0e12ab-v2"
    assert versions.split_epoch("5f3a9c0e12ab-v2") == ("5f3a9c0e12ab", "@v2")
    assert versions.split_epoch("5f3a9c0e12ab") == ("5f3a9c0e12ab", "")


def test_a_version_is_the_same_in_every_process():
    """Nothing of a process (an address, a hash seed) enters a version: Chirp's pipelines get
    the same versions in two fresh interpreters."""
    import subprocess

    script = (
        "from liveviews.app import load_app; from liveviews.pipeline import code as pipelinecode;"
        "app = load_app('demo.chirp:app');"
        "print(sorted((p, pipelinecode.derive(app, p)) for p in app.pipelines))"
    )
    runs = [
        subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                       check=True, env={**os.environ, "PYTHONHASHSEED": seed}).stdout
        for seed in ("1", "2")
    ]  # fmt: skip
    assert runs[0] == runs[1] and "entities" in runs[0]
