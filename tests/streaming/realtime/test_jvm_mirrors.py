"""What the JVM source writes in the Python side's formats stays what the Python side defines:
the dead letters' keys, record limits and script (``DeadLetters.java``, ``LogRows.java``)."""

from __future__ import annotations

import re
from pathlib import Path

from liveviews.log import deadletters
from liveviews.log.events import MAX_EVENT_TIME_MS

JAVA = (
    Path(__file__).parents[3] / "streaming/pipeline/realtime/jvm/src/main/java/io/liveviews/spark"
)


def _constant(source: str, name: str) -> str:
    found = re.search(rf"static final \w+ {name} = (.+?);\n", source, re.S)
    assert found, f"{name} is not declared"
    return found.group(1)


def test_dead_letters_are_kept_where_and_as_the_python_side_keeps_them() -> None:
    source = (JAVA / "DeadLetters.java").read_text()
    assert _constant(source, "PREFIX") == f'"{deadletters.PREFIX}"'
    assert _constant(source, "ORDER_STREAM") == f'"{deadletters.ORDER_STREAM}"'
    assert _constant(source, "MAX_FIELD") == str(deadletters.MAX_FIELD)
    lines = re.findall(r'^\s+"(.*)"[,)]', _constant(source, "RECORD"), re.M)
    assert lines == deadletters._RECORD.strip().splitlines()


def test_the_newest_event_time_is_the_python_sides() -> None:
    source = (JAVA / "LogRows.java").read_text()
    assert _constant(source, "MAX_EVENT_TIME_MS") == f"{MAX_EVENT_TIME_MS}L"
