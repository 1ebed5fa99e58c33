"""docs/CONFIGURATION.md's tables, written from the declarations (``liveviews.config.catalog``).

The page keeps its prose; each table sits between ``<!-- settings: SECTION -->`` and
``<!-- end settings -->`` and is rewritten whole. ``python -m liveviews.config.page PAGE``
rewrites them; ``--check`` only says whether the page is current (exit 1 when it is not).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from liveviews.config.catalog import declared
from liveviews.config.declare import SECTIONS, Setting

BLOCK = re.compile(r"(<!-- settings: (\w+) -->\n)(.*?)(<!-- end settings -->)", re.S)


def _code(text: str) -> str:
    return f"`{text}`" if text else ""


def _row(setting: Setting[object]) -> str:
    if setting.section == "internal":
        return f"| `{setting.name}` | {setting.doc} |"
    return (
        f"| `{setting.name}` | {_code(setting.key)} | {setting.default_shown} "
        f"| {setting.kind.allowed} | {setting.doc} |"
    )


def table(section: str) -> str:
    if section not in SECTIONS:
        raise ValueError(f"docs/CONFIGURATION.md names no section {section!r}")
    settings = [s for s in declared() if s.section == section]
    if section == "internal":
        head = "| variable | set for |\n|---|---|\n"
    else:
        head = "| variable | file key | default | takes | meaning |\n|---|---|---|---|---|\n"
    return head + "".join(_row(s) + "\n" for s in settings)


def render(page: str) -> str:
    """``page`` with each table written anew from the declarations."""
    return BLOCK.sub(lambda m: m[1] + table(m[2]) + m[4], page)


def sections(page: str) -> list[str]:
    return [m[2] for m in BLOCK.finditer(page)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m liveviews.config.page", description=__doc__)
    parser.add_argument("page", type=Path, help="the page, docs/CONFIGURATION.md")
    parser.add_argument("--check", action="store_true", help="only say if it is current")
    args = parser.parse_args(argv)
    text = args.page.read_text()
    written = render(text)
    if args.check:
        if written != text:
            print(f"{args.page} is not what the declarations say: run "
                  f"python -m liveviews.config.page {args.page}", file=sys.stderr)  # fmt: skip
            return 1
        return 0
    args.page.write_text(written)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
