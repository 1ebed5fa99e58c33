"""The uvicorn boundary (``liveviews.gateway._uvicorn``): an upgrade that breaks the connection takeover
is caught by name, and the pins in pyproject.toml are the versions the takeover is tested with.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from liveviews.gateway._uvicorn import compat

PYPROJECT = Path(__file__).resolve().parents[3] / "pyproject.toml"


def test_the_installed_versions_have_everything_the_takeover_uses() -> None:
    assert compat.missing() == []
    compat.check()


def test_a_method_an_upgrade_removed_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(HttpToolsProtocol, "handle_websocket_upgrade")
    with pytest.raises(compat.IncompatibleServer) as refused:
        compat.check()
    message = str(refused.value)
    assert "uvicorn.protocols.http.httptools_impl.HttpToolsProtocol.handle_websocket_upgrade" in (
        message
    )
    assert "uvicorn>=0.54,<0.55" in message and "server/_uvicorn/" in message


def test_an_instance_attribute_an_upgrade_renamed_is_named() -> None:
    class Cycle:  # as uvicorn's cycle would be with ``chunked_encoding`` renamed
        def __init__(self) -> None:
            self.transport = None
            self.chunked = False

    assert compat.missing([(Cycle, ("transport", "chunked_encoding"))]) == [
        f"{__name__}.{Cycle.__qualname__}.chunked_encoding"
    ]


def test_the_pins_are_the_tested_versions() -> None:
    dependencies = tomllib.loads(PYPROJECT.read_text())["project"]["dependencies"]
    for name, tested in compat.TESTED.items():
        assert f"{name}{tested}" in dependencies, f"pyproject.toml must pin {name}{tested}"


def test_nothing_outside_the_boundary_imports_uvicorns_protocols() -> None:
    root = PYPROJECT.parent / "server"
    offenders = [
        str(path.relative_to(root.parent))
        for path in root.rglob("*.py")
        if "_uvicorn" not in path.parts
        and ("uvicorn.protocols" in path.read_text() or "websockets." in path.read_text())
    ]
    assert offenders == []
