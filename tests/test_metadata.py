"""The package's metadata and the JavaScript client's say the same: one license, one home,
one place for issues."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_python_and_javascript_packages_name_the_same_project() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    package = json.loads((ROOT / "client-js" / "package.json").read_text())
    urls = project["urls"]
    assert {"Homepage", "Documentation", "Repository", "Issues"} <= set(urls)
    assert all(u.startswith("https://") for u in urls.values())
    assert package["license"] == project["license"]
    assert package["bugs"]["url"] == urls["Issues"]
    assert package["repository"]["url"] == f"git+{urls['Repository']}.git"
    assert package["repository"]["directory"] == "client-js"
    assert (ROOT / "LICENSE").is_file() and (ROOT / "client-js" / "LICENSE").is_file()
