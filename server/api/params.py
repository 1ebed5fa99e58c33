"""How the HTTP API reads what a request names outside its body: query parameters, numbers
in parameters and headers, and the view and key of a path.

One way for all of them: a parameter is given at most once, a number is ASCII digits and
nothing else, and a name in the path is what the client percent-encoded, never a guess.
"""

from __future__ import annotations

import re
from urllib.parse import unquote_to_bytes

from starlette.requests import HTTPConnection

from server.errors import BadRequest, NotFound

# ASCII only: str.isdigit() also takes "²" (which int() refuses) and "٣" (which it reads as 3),
# and int() itself takes signs, spaces, "_" and any script's digits.
DIGITS = re.compile(r"[0-9]+")


def whole_number(raw: str, maximum: int) -> int | None:
    """``raw`` as a number from 0 to ``maximum``; None for anything else.

    Leading zeros are allowed; the length is checked before ``int()``, which would refuse a
    string of over 4,300 digits with an error of its own and take time to read a long one.
    """
    if DIGITS.fullmatch(raw) is None:
        return None
    significant = raw.lstrip("0")
    if len(significant) > len(str(maximum)):
        return None
    value = int(significant or "0")
    return value if value <= maximum else None


def number_over(raw: str, maximum: int) -> bool:
    """Is ``raw`` a number (ASCII digits) larger than ``maximum``?"""
    return DIGITS.fullmatch(raw) is not None and whole_number(raw, maximum) is None


def single(conn: HTTPConnection, name: str) -> str | None:
    """A query parameter given at most once: which of several to take is anyone's guess."""
    values = conn.query_params.getlist(name)
    if len(values) > 1:
        raise BadRequest(f"send {name!r} once, not {len(values)} times.", code="invalid_parameter")
    return values[0] if values else None


def single_header(conn: HTTPConnection, name: str, code: str) -> str | None:
    """A header sent at most once (``code`` names the refusal of a second one), without the
    spaces and tabs around its value, which are not part of it (RFC 9110 5.5); the server
    drops those before the value, not after."""
    values = conn.headers.getlist(name)
    if len(values) > 1:
        raise BadRequest(f"send one {name} header, not {len(values)}.", code=code)
    return values[0].strip(" \t") if values else None


def view_and_key(conn: HTTPConnection) -> tuple[str, str]:
    """The path's view and key, refused (``invalid_key``) if their %-escapes are not UTF-8.

    The server decodes such escapes to U+FFFD, so ``%FF`` would name the key "\\ufffd", which
    is not the key the client sent.
    """
    view, key = conn.path_params["view"], conn.path_params["key"]
    raw = conn.scope.get("raw_path")
    if isinstance(raw, bytes) and "\ufffd" in view + key:
        try:
            unquote_to_bytes(raw).decode("utf-8")
        except UnicodeDecodeError:
            raise NotFound(
                "a view and its key are UTF-8 once their %-escapes are decoded; this path's "
                "are not.",
                code="invalid_key",
            ) from None
    return view, key
