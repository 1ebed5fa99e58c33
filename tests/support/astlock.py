"""``ast.parse`` one thread at a time in the test process.

CPython 3.11 keeps ``ast.parse``'s recursion count in one place for every thread (cpython issue
106905): a garbage collection in the middle of one thread's parse can run another thread's
parse, and the first then fails with ``SystemError: AST constructor recursion depth mismatch``.
In the suite, gateways run in threads of the test process and format the tracebacks they log,
which parses (3.11's tracebacks point at the failing expression), while a test imports a module
that pytest rewrites, which parses too: two fuzz tests failed so. A production process parses
only the tracebacks it logs, and a failure there is the log line's, not the request's.
"""

from __future__ import annotations

import ast
import functools
import sys
import threading
from typing import Any

_LOCK = threading.RLock()  # a collection inside a parse may log, and so parse again


def parse_one_at_a_time() -> None:
    """Make ``ast.parse`` (which pytest's rewriting and ``traceback`` call through the module)
    take a lock of the process; once, and only where the count is shared."""
    if sys.version_info >= (3, 12) or getattr(ast.parse, "one_at_a_time", False):
        return
    parse = ast.parse

    @functools.wraps(parse)
    def locked(*args: Any, **kwargs: Any) -> Any:
        with _LOCK:
            return parse(*args, **kwargs)

    locked.one_at_a_time = True  # type: ignore[attr-defined]
    ast.parse = locked  # type: ignore[assignment]
