"""The project's source files as syntax trees, for the tests that read the code itself."""

from __future__ import annotations

import ast
import gc
from pathlib import Path


def parse(path: Path) -> ast.Module:
    """``path``'s syntax tree, built with the cyclic garbage collector paused.

    A collection during the tree's construction can run a finalizer (py4j's JavaObject
    detaching itself from the run's JVM, which logs when the connection is gone), and on
    Python 3.11.7 code run there makes the construction fail with ``SystemError: AST
    constructor recursion depth mismatch`` (CPython gh-106905, fixed in 3.11.8).
    """
    source = path.read_text()
    gc.disable()
    try:
        return ast.parse(source)
    finally:
        gc.enable()
