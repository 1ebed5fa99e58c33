"""``ast.parse`` in threads of the test process (tests/support/astlock.py): on CPython 3.11 a
collection in the middle of one thread's parse can run another's, and the first fails with a
SystemError; with the suite's lock no two parses overlap."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

OVERLAPS = """
import ast, sys, threading, time
from tests.support.astlock import parse_one_at_a_time

inside, most, count = 0, 0, threading.Lock()
real = ast.parse
def slow(*args, **kwargs):  # a parse that gives up the GIL halfway, as a collection may
    global inside, most
    with count:
        inside += 1
        most = max(most, inside)
    time.sleep(0.002)
    try:
        return real(*args, **kwargs)
    finally:
        with count:
            inside -= 1
ast.parse = slow
if sys.argv[1] == "locked":
    parse_one_at_a_time()

def parse():
    for _ in range(50):
        ast.parse("{}['x'] + 1")
threads = [threading.Thread(target=parse) for _ in range(4)]
for t in threads: t.start()
for t in threads: t.join()
print(most)
"""


def most_at_once(mode: str) -> int:
    done = subprocess.run([sys.executable, "-c", OVERLAPS, mode], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return int(done.stdout)


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="the count is per thread from 3.12")
def test_threads_parse_one_at_a_time() -> None:
    assert most_at_once("unlocked") > 1  # the threads do overlap without the lock
    assert most_at_once("locked") == 1
