"""Every setting is declared once (liveviews.config.catalog): docs/CONFIGURATION.md is what the
declarations say, every variable the code names is declared, and every declaration is read."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from liveviews.config import catalog
from liveviews.config.catalog import by_name, declared
from liveviews.config.declare import SECTIONS, Setting
from liveviews.config.page import render, sections
from tests.support.sources import parse

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "CONFIGURATION.md"
SOURCES = ("streaming", "server", "demo")
VARIABLE = re.compile(r"""["'](LV_[A-Z0-9_]+|REDIS_URL|DATABASE_URL|SPARK_MASTER)["']""")
FAMILIES = ("LV_SPARK_CONF_",)
CATALOG = ROOT / "streaming" / "config" / "catalog.py"


def sources() -> list[Path]:
    return [p for folder in SOURCES for p in (ROOT / folder).rglob("*.py") if p != CATALOG]


def test_the_page_is_what_the_declarations_say() -> None:
    text = PAGE.read_text()
    assert sections(text) == list(SECTIONS), "one table per section, in the catalog's order"
    assert render(text) == text, "run: python -m liveviews.config.page docs/CONFIGURATION.md"


def test_every_variable_the_code_names_is_declared() -> None:
    named = {n for p in sources() for n in VARIABLE.findall(p.read_text())}
    undeclared = {n for n in named if n not in by_name() and not n.startswith(FAMILIES)}
    assert sorted(undeclared) == []
    assert {"LV_PORT", "REDIS_URL", "LV_STATIC_DIR"} <= named  # the scan finds names


def _catalog_names_used(path: Path) -> set[str]:
    """The catalog's names a module uses: ``C.NAME`` (the catalog imported as ``C``) or
    imported from it by name."""
    tree = parse(path)
    used = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "liveviews.config.catalog":
            used.update(a.name for a in node.names)
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "C"
        ):
            used.add(node.attr)
    return used


def test_every_declaration_is_read_by_a_process() -> None:
    constants = {k for k, v in vars(catalog).items() if isinstance(v, Setting)}
    used = set().union(*(_catalog_names_used(p) for p in sources()))
    assert sorted(constants - used) == []


@pytest.mark.parametrize("setting", declared(), ids=lambda s: s.name)
def test_each_default_is_a_value_the_setting_takes(setting: Setting[object]) -> None:
    """A default written in the catalog goes through the same reader as a set value."""
    assert setting.doc and setting.kind.allowed and setting.section in SECTIONS
    default = setting.default
    if default is None or isinstance(default, tuple) or setting.family:
        return
    written = ("on" if default else "off") if isinstance(default, bool) else str(default)
    assert setting.kind.parse(written, setting.name) == default
