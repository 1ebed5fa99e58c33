"""Values that careless readers of query parameters and headers get wrong, and what the
documents say each parameter takes.

The values go on the wire as they are: ``str`` is sent as UTF-8, ``bytes`` as they are (so
``b"\\xff"`` is an invalid UTF-8 percent-escape in a query, or a raw byte in a header), and a
tuple of several is a parameter or header sent that many times. The reference functions are
written from docs/PROTOCOL.md (sections 1, 3 and 9) and the OpenAPI document, apart from the
gateway's code, so that a bug cannot hide in both.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote_to_bytes

from hypothesis import strategies as st

Raw = str | bytes
Sent = tuple[Raw, ...]
"""The values of one parameter or header in one request, in order: one, or a repetition."""

MAX_PART = 2**64 - 1

# Characters that str.isdigit(), str.isdecimal() or int() take for digits, and ASCII ones.
NON_ASCII_DIGITS = ("²", "³", "¹", "٣", "۳", "१", "١", "１", "𝟙", "߃", "〇", "①", "Ⅻ", "𑁦")
ODD_CHARS = ("+", "-", " ", "\t", "\n", "\u00a0", "\u2007", "\u3000", "_", ".", "e", "x", "\x00",
             "\ufffd")  # fmt: skip

NUMBERS: tuple[Raw, ...] = (
    "", "0", "7", "007", "100", "101", "-1", "+1", "-0", "+0", " 1", "1 ", "\t1", "1\n",
    "\u00a01", "1e2", "0x10", "1_0", "1.0", "Infinity", "NaN", "\x00", "1\x00", "\ufffd",
    *NON_ASCII_DIGITS, "1²", "²1", "1٣", "9" * 20, "1" + "0" * 30, "9" * 4301, "9" * 6000,
    "0" * 6000 + "7", "0" * 6000 + "101", b"\xff", b"1\xff", b"\xc0\xb1", b"\xed\xa0\x80",
    b"\xd9", b"\xef\xbc\x91",
)  # fmt: skip

_ID = "e.1732170000789-0"
EVENT_IDS: tuple[Raw, ...] = (
    "", _ID, "e.0-0", "e.01-00", "A_z-9.1-2", "x" * 64 + ".1-0", "x" * 65 + ".1-0",
    f"e.{MAX_PART}-{MAX_PART - 1}", f"e.{MAX_PART}-{MAX_PART}", f"e.{MAX_PART + 1}-0",
    f"e.0-{MAX_PART + 1}", "e." + "0" * 20 + "-0", "e." + "0" * 21 + "-0", "e.1", "e", ".1-0",
    "e.1-", "e.-1", "e.1-2-3", "e.1--0", "e.+1-0", "e.1-+0", "e. 1-0", " e.1-0", "e.1-0 ",
    "e.1-0\n", "e.1e2-0", "e.0x1-0", "e.1_0-0", "é.1-0", "e e.1-0", "e.1-0\x00",
    *(f"e.{d}-0" for d in NON_ASCII_DIGITS), "e.1-١", "e.1-１", "e." + "9" * 6000 + "-0",
    b"e.\xff-0", b"\xff.1-0", b"e.1-0\xff", b"e.\xc2\xb2-0",
)  # fmt: skip

KEYS: tuple[str, ...] = (
    # Path segments as sent, percent-encoded already.
    "alice", "%FF", "a%C3", "%C0%AE", "%ED%A0%80", "%F4%90%80%80", "%F8%88%80%80%80", "%00",
    "%EF%BF%BD", "%C2%B2", "%D9%A3", "%EF%BC%91", "x" * 256, "x" * 257, "%20", "%2F", "a%",
    "%G0", "%25FF", "%E2%80%A8", "%0A",
)  # fmt: skip

VIEWS: tuple[str, ...] = ("profiles", "nope", "%FF", "profile%73", "PROFILES", "%00", "")


def number_ok(raw: str, maximum: int) -> bool:
    """PROTOCOL.md: a whole number in ASCII decimal; leading zeros are the same number."""
    if re.fullmatch(r"[0-9]+", raw) is None:
        return False
    digits, limit = raw.lstrip("0") or "0", str(maximum)
    return (len(digits), digits) <= (len(limit), limit)


def event_id_ok(raw: str) -> bool:
    """PROTOCOL.md section 3 and the OpenAPI pattern: ``<epoch>.<ms>-<seq>``, ``<ms>`` and
    ``<seq>`` ASCII decimals of at most 20 digits below 2^64; the very last position, which has
    none after it, is no place to resume from."""
    m = re.fullmatch(r"[A-Za-z0-9_-]{1,64}\.([0-9]{1,20})-([0-9]{1,20})", raw)
    if m is None:
        return False
    ms, seq = int(m[1]), int(m[2])
    return ms <= MAX_PART and seq <= MAX_PART and (ms, seq) != (MAX_PART, MAX_PART)


def key_ok(segment: str) -> str | None:
    """The key a percent-encoded path segment names, if it can name one: UTF-8 once decoded,
    1 to 256 characters (a '/' in it written %2F: the segment is still one)."""
    if "/" in segment:
        return None
    try:
        key = unquote_to_bytes(segment).decode("utf-8")
    except UnicodeDecodeError:
        return None
    return key if 1 <= len(key) <= 256 else None


def as_query(raw: Raw) -> str:
    """What a server reads from a query value: its UTF-8, invalid bytes replaced."""
    return raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw


def as_header(raw: Raw) -> str:
    """What a server reads from a header value: its bytes as Latin-1, spaces and tabs around
    it dropped (RFC 9110 5.5)."""
    data = raw if isinstance(raw, bytes) else raw.encode("utf-8")
    return data.decode("latin-1").strip(" \t")


def sendable_in_a_header(raw: Raw) -> bool:
    """Control characters but the tab (NUL, CR, LF, DEL, ...) are refused by the HTTP parser
    before the gateway sees the request (RFC 9110 5.5); every other byte is the gateway's."""
    data = raw if isinstance(raw, bytes) else raw.encode("utf-8")
    return not any(b < 0x20 and b != 0x09 or b == 0x7F for b in data)


def twice(valid: Raw, invalid: Raw) -> tuple[Sent, ...]:
    """A parameter sent twice, in every order of a valid and an invalid value."""
    return ((valid, valid), (valid, invalid), (invalid, valid), (invalid, invalid))


# Strategies for property tests: text made of digits of every script and the characters that
# parsers take for part of a number, and numbers far larger than any limit.
NUMBER_CHARS = st.sampled_from(("0", "1", "7", "9", *NON_ASCII_DIGITS, *ODD_CHARS))
NUMBER_LIKE = st.one_of(
    st.text(NUMBER_CHARS, max_size=12),
    st.integers(-(10**30), 10**30).map(str),
    st.integers(0, 6000).map(lambda n: "9" * n),
    st.builds(lambda z, n: "0" * z + str(n), st.integers(0, 5000), st.integers(0, 200)),
    st.text(max_size=8),
)

ETAG = '"<etag>"'
"""Stands for the snapshot's entity tag, without its ``W/``, in ``ETAGS``."""
ETAGS: tuple[Raw, ...] = (
    f"W/{ETAG}", ETAG, "*", f'"x", W/{ETAG}', f'"x",{ETAG}', '"x"', "", "²", b"\xff",
    f"W/{ETAG}x", f"W/{ETAG[:-1]}", "W/", '""',
)  # fmt: skip


def tokens_like(token: str, bearer: bool) -> list[Raw]:
    """Values near a valid ``token`` (in an Authorization header's form if ``bearer``): cut,
    extended, re-encoded, with spaces and NUL, and with other schemes."""
    out: list[Raw] = ["", "x", "²", "e" * 6000, "a.b.c", b"\xff", token + "x", token[:-1],
                      token.replace(".", "\u2024"), token + "\x00", token + "²", " " + token,
                      token + " ", token + b"\xff".decode("latin-1")]  # fmt: skip
    if not bearer:
        return [*out, f"Bearer {token}"]
    return [f"Bearer {t}" for t in out if isinstance(t, str)] + [
        token, f"Basic {token}", "Bearer", f"Bearer\t{token}", f"bearer {token}",
        f"BEARER {token}", f"Bearer  {token}", b"Bearer \xff", f"Bearer {token}, Bearer x",
    ]  # fmt: skip


EVENT_ID_LIKE = st.builds(
    lambda e, sep, ms, dash, seq: f"{e}{sep}{ms}{dash}{seq}",
    st.sampled_from(["e", "", "x" * 65, "é"]) | st.text(max_size=6),
    st.sampled_from([".", "", "..", ":"]),
    NUMBER_LIKE, st.sampled_from(["-", "", "--", "."]), NUMBER_LIKE,
)  # fmt: skip
QUERY_VALUES = st.sampled_from(NUMBERS + EVENT_IDS) | st.binary(max_size=8) | st.text(max_size=8)
HEADER_VALUES = (st.sampled_from(EVENT_IDS + ETAGS) | EVENT_ID_LIKE | st.binary(max_size=8)).filter(
    lambda v: sendable_in_a_header(v) and v[:1] not in (" ", "\t", b" ", b"\t")
)
"""Header values requests sends as they are: it refuses leading spaces (the sweep, sent with
http.client, has them)."""
PATH_SEGMENTS = st.sampled_from(KEYS) | st.binary(min_size=1, max_size=8).map(
    lambda b: "".join(f"%{c:02X}" for c in b)
)
"""Segments as sent: the known ones, and any bytes, each percent-encoded."""


# What the documents say each declared parameter takes, for the sweep of test_api_fuzz.py.


@dataclass(frozen=True)
class Target:
    """One query parameter, header or path parameter of one operation."""

    method: str
    path: str
    where: str
    name: str


def targets(doc: dict[str, Any]) -> list[Target]:
    """Each operation's parameters, and the query parameter and header its token may come in."""
    schemes = doc["components"]["securitySchemes"]
    out: list[Target] = []
    for path, methods in doc["paths"].items():
        for method, op in methods.items():
            named = [(p["in"], p["name"]) for p in op.get("parameters", [])]
            for scheme in (schemes[s] for req in op.get("security", []) for s in req):
                if scheme["type"] == "http":
                    named.append(("header", "Authorization"))
                elif scheme["in"] in ("query", "header"):
                    named.append((scheme["in"], scheme["name"]))
            out += [Target(method.upper(), path, w, n) for w, n in dict.fromkeys(named)]
    return out


def documented(target: Target, sent: Sent, token: str, views: set[str]) -> bool:
    """Do the documents let the gateway serve a request whose only values of ``target`` are
    ``sent``, the token being ``token`` (and, unless ``target`` carries it, in its header)?"""
    if target.name == "If-None-Match":
        return True  # any tag: served whole (200) or not modified (304)
    if target.path == "/v1/live":
        return False  # the application swept (Chirp) declares no listable view
    if target.path == "/v1/groups/live" and target.name in GROUP_REFUSALS:
        return len(sent) == 1 and group_member_ok(target.name, as_query(sent[0]), views)
    if target.name in WINDOW_PARAMETERS:
        return False  # the key swept (profiles/alice) has no order, so no window
    if len(sent) != 1:
        return False  # which of several to take is anyone's guess
    raw = sent[0]
    if target.where == "path" and target.name == "stream":
        text = unquote_to_bytes(str(raw)).decode("utf-8", "replace")
        return re.fullmatch(r"[A-Za-z0-9_-]{1,64}", text) is not None
    if target.where == "path":
        name = key_ok(str(raw))
        return name is not None and (target.name == "key" or name in views)
    text = as_header(raw) if target.where == "header" else as_query(raw)
    if target.name == "recent":
        return number_ok(text, 100)
    if target.name == "access_token":
        return text == token
    if target.name == "Authorization":  # RFC 6750: "Bearer" 1*SP token, the scheme any case
        return re.fullmatch(r"(?i:bearer) +(\S+)", text) is not None and text.split()[1] == token
    if target.name.lower() in ("last_event_id", "last-event-id"):
        return text == "" or event_id_ok(text)
    if target.name == "Idempotency-Key":  # the same body each time: the same answer again
        return re.fullmatch(r"[\x21-\x7e]{1,200}", text) is not None
    if target.name == "stream":  # an SSE stream's id, which its client chooses
        return re.fullmatch(r"[A-Za-z0-9_-]{1,64}", text) is not None
    raise AssertionError(f"{target}: say what the documents accept for it here")


REFUSALS = {
    "recent": {"invalid_parameter"},
    "last_event_id": {"invalid_last_event_id", "invalid_parameter"},
    "Last-Event-ID": {"invalid_last_event_id"},
    "Idempotency-Key": {"invalid_idempotency_key"},
    "access_token": {"token_invalid", "token_missing"},
    "Authorization": {"token_invalid", "token_missing"},
    "key": {"invalid_key", "not_found"},
    "view": {"unknown_view", "invalid_key", "not_found"},
    "prefix": {"invalid_parameter"},
    "filter": {"invalid_filter", "invalid_parameter"},
    "limit": {"invalid_parameter", "not_ranked"},
    "after_score": {"invalid_parameter"},
    "after_row": {"invalid_parameter"},
    "stream": {"invalid_parameter", "not_found"},
}
"""The codes a target's refused values may be answered with (docs/PROTOCOL.md, section 2)."""

WINDOW_PARAMETERS = ("limit", "after_score", "after_row")


GROUP_REFUSALS = {
    "view": {"unknown_view", "invalid_parameter"},
    "key": {"invalid_key", "invalid_parameter"},
    "last_event_id": {"invalid_last_event_id", "invalid_parameter"},
    "Last-Event-ID": {"invalid_last_event_id"},
}
"""On ``/v1/groups/live``: a view or key given twice is a member without its pair."""


def group_member_ok(name: str, text: str, views: set[str]) -> bool:
    """Does a group (``/v1/groups/live``) take ``text`` as its member's ``name``, the other
    member parameter being valid? Its ids are a group's, which no sweep value is."""
    if name == "view":
        return text in views
    if name == "key":
        return 1 <= len(text) <= 256
    return text == ""


def refusals(target: Target) -> set[str]:
    """``REFUSALS`` of ``target``'s name; on ``/v1/live``, whose requests name a view that is not
    listable (``documented``), also ``not_listable``, and its ``view`` parameter's own codes;
    on ``/v1/groups/live``, ``GROUP_REFUSALS`` for a member's parameters and its ids."""
    if target.path == "/v1/groups/live":
        return GROUP_REFUSALS.get(target.name, REFUSALS[target.name])
    if target.path != "/v1/live":
        return REFUSALS[target.name]
    if target.name == "view":
        return {"unknown_view", "not_listable", "invalid_parameter"}
    return REFUSALS[target.name] | {"not_listable"}


def family(target: Target, token: str) -> list[Sent]:
    """The values the sweep sends as ``target``: one at a time, then repeated."""
    if target.where == "path":
        return [(v,) for v in (KEYS if target.name == "key" else VIEWS)]
    if target.name in ("access_token", "Authorization"):
        valid = token if target.name == "access_token" else f"Bearer {token}"
        values = [valid, *tokens_like(token, bearer=target.name == "Authorization")]
        return [(v,) for v in values] + list(twice(valid, "x"))
    if target.name == "If-None-Match":
        return [(v,) for v in ETAGS] + [("*", '"x"'), ('"x"', "*")]
    valid = "5" if target.name == "recent" else "e.1-0"
    return [(v,) for v in NUMBERS + EVENT_IDS] + list(twice(valid, "x"))
