"""How the HTTP API reads what a request names outside its body: query parameters, numbers
in parameters and headers, and the view and key of a path.

One way for all of them: a parameter is given at most once, a number is ASCII digits and
nothing else, and a name in the path is what the client percent-encoded, never a guess.
"""

from __future__ import annotations

import re
from urllib.parse import unquote_to_bytes

from starlette.convertors import Convertor, register_url_convertor
from starlette.requests import HTTPConnection

from liveviews.gateway.errors import BadRequest, NotFound

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


def view_and_key(conn: HTTPConnection, tail: str | None = None) -> tuple[str, str]:
    """The path's view and key, each one segment as the client percent-encoded it, so a key may
    hold a '/' written ``%2F`` (a listable view's keys often do: ``board/task``). Refused with
    ``invalid_key`` if their %-escapes are not UTF-8, and ``not_found`` if the key is not one
    segment (a '/' not encoded).

    The routes match the decoded path, where a key's ``%2F`` is a '/' like any other: what the
    client meant is only in the raw path. ``tail``: the path's last segment after the key
    (``live``).
    """
    segments = path_segments(conn)
    if segments is None:
        return conn.path_params["view"], conn.path_params["key"]
    if tail is not None and segments[-1:] == [tail]:
        segments = segments[:-1]
    if len(segments) != 2:
        raise NotFound(
            "a key is one segment of the path: percent-encode a '/' in it as %2F.",
            code="not_found",
        )
    try:
        view, key = (unquote_to_bytes(s).decode("utf-8") for s in segments)
    except UnicodeDecodeError:
        raise NotFound(
            "a view and its key are UTF-8 once their %-escapes are decoded; this path's are not.",
            code="invalid_key",
        ) from None
    return view, key


VIEW_PATHS = (b"/v1/views/", b"/v1/operator/views/")


class KeyPath(Convertor[str]):
    """The routes' ``{key:keypath}``: the rest of the decoded path, line breaks included (a key
    may hold any character); ``view_and_key`` reads the key from the raw path."""

    regex = "(?s:.+)"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


register_url_convertor("keypath", KeyPath())


def path_segments(conn: HTTPConnection) -> list[str] | None:
    """The raw segments of a view's path after ``/v1/views/`` (or the operator's): ``[view,
    key]`` or ``[view, key, "live"]`` when the key is one segment; None without a raw path."""
    raw = conn.scope.get("raw_path")
    if not isinstance(raw, bytes):
        return None
    path = raw.split(b"?", 1)[0]
    for prefix in VIEW_PATHS:
        if path.startswith(prefix):
            return path[len(prefix) :].decode("latin-1").split("/")
    return None
