"""docs/CONFIGURATION.md and the variables the processes read: neither has one the other lacks."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "CONFIGURATION.md"
SOURCES = ("streaming", "server", "demo")
VARIABLE = re.compile(r"""["'](LV_[A-Z0-9_]+|REDIS_URL|DATABASE_URL|SPARK_MASTER)["']""")
PREFIXES = {"LV_SPARK_CONF_": "LV_SPARK_CONF_<NAME>"}
"""Variables read by prefix, and how the page names the family."""


def read_by_code() -> set[str]:
    found = set()
    for folder in SOURCES:
        for path in (ROOT / folder).rglob("*.py"):
            for name in VARIABLE.findall(path.read_text()):
                found.add(PREFIXES.get(name, name))
    return found


def documented() -> set[str]:
    names = set()
    for line in PAGE.read_text().splitlines():
        if line.startswith("| `"):
            first = line.split("|")[1]
            names.update(re.findall(r"`([A-Z][A-Z0-9_<>]+)`", first))
    return names


def test_every_variable_a_process_reads_is_documented() -> None:
    assert sorted(read_by_code() - documented()) == []


def test_every_documented_variable_is_read() -> None:
    assert sorted(documented() - read_by_code()) == []


def test_the_scan_finds_what_it_should() -> None:
    code = read_by_code()
    assert {"LV_PORT", "REDIS_URL", "LV_SPARK_CONF_<NAME>", "LV_DEMO_ACTIVITY"} <= code
    assert {"LV_PORT", "LV_HOST", "LV_JWT_AUDIENCE"} <= documented()
