"""How the commands show things to a person: rich tables on stdout, times and figures."""

from __future__ import annotations

import sys
import time
from typing import Any

from rich.console import Console
from rich.table import Table

PIPED_WIDTH = 160


def console(stderr: bool = False) -> Console:
    """The console of stdout (or stderr, for progress that scripts should not read); made per
    command, so that it writes to the streams of the moment (a test captures them)."""
    stream = sys.stderr if stderr else sys.stdout
    # A terminal's own width; piped into a file or a pager, lines as wide as a table needs.
    width = None if stream.isatty() else PIPED_WIDTH
    return Console(highlight=False, soft_wrap=False, stderr=stderr, width=width)


def table(*columns: str, free: str | None = None) -> Table:
    """Columns kept whole (ids, offsets, times), except ``free``, the one that may wrap."""
    t = Table(box=None, header_style="bold", pad_edge=False)
    for c in columns:
        t.add_column(c, no_wrap=c != free)
    return t


def section(out: Console, title: str, body: Table | str | None = None) -> None:
    """A heading on a line of its own (a table's own title would wrap to the table's width),
    then its table, then a blank line."""
    out.print(title, style="bold", markup=False)
    if isinstance(body, str):
        out.print(body, markup=False)
    elif body is not None:
        out.print(body)
    out.print()


def when(seconds: float | None) -> str:
    """A moment, in UTC, to the second."""
    if seconds is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(seconds))


def ms_text(ms: float | None) -> str:
    if ms is None:
        return "-"
    return f"{ms / 1000:.2f} s" if ms >= 1000 else f"{ms:.0f} ms"


def count_text(n: int, capped: bool = False) -> str:
    return f"≥{n:,}" if capped else f"{n:,}"


def json_text(value: Any, width: int = 100) -> str:
    import orjson

    text = orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()
    return text if len(text) <= width else text[: width - 1] + "…"
