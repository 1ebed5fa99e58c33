"""Tokens kept out of the gateway's log lines.

A request's target carries a token in ``?access_token=`` (browsers' EventSource and WebSocket
cannot set headers), and uvicorn writes targets into its lines: the access log's request line,
a WebSocket's ``"WebSocket /v1/ws?access_token=..." [accepted]``. A log file is read by more
people, and kept longer, than a token is meant for, so every line of uvicorn's and the
gateway's loggers has its tokens replaced by ``[redacted]`` before any handler sees it.
"""

from __future__ import annotations

import logging
import re
from typing import Any

REDACTED = "[redacted]"

_SECRETS = re.compile(
    r"(?P<keep>(?:access_token|lv_token)=|\bBearer\s+)[^\s&;,\"'<>]+"
    # A JWT wherever it appears: three base64url parts, the first a JSON header ("eyJ").
    r"|\beyJ[A-Za-z0-9_-]*\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*",
    re.IGNORECASE,
)

LOGGERS = ("uvicorn", "uvicorn.error", "uvicorn.access", "uvicorn.asgi", "liveviews.gateway")
"""uvicorn's loggers and the gateway's; a filter on a logger sees only the records logged
through that very logger, so ``install`` also covers the children that exist then."""


def redact(text: str) -> str:
    return _SECRETS.sub(lambda m: (m.group("keep") or "") + REDACTED, text)


def _redacted(value: Any) -> Any:
    return redact(value) if isinstance(value, str) else value


class RedactTokens(logging.Filter):
    """Replaces tokens in a record's message, its arguments and its formatted traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str):
            record.msg = redact(record.msg)
        # Arguments are redacted one by one, not merged into the message: uvicorn's access
        # formatter reads them by position.
        if isinstance(record.args, tuple):
            record.args = tuple(_redacted(a) for a in record.args)
        elif isinstance(record.args, dict):
            record.args = {k: _redacted(v) for k, v in record.args.items()}
        if record.exc_info and not record.exc_text:
            record.exc_text = redact(logging.Formatter().formatException(record.exc_info))
        return True


_FILTER = RedactTokens()


def install() -> None:
    """Add the filter to uvicorn's and the gateway's loggers (once; calling again adds it to
    loggers created since)."""
    names = set(LOGGERS)
    for name in list(logging.Logger.manager.loggerDict):
        if any(name.startswith(f"{root}.") for root in ("uvicorn", "liveviews.gateway")):
            names.add(name)
    for name in sorted(names):
        logger = logging.getLogger(name)
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)
