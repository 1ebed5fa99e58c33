"""Property tests of the wire protocol's encoders and decoders (docs/PROTOCOL.md).

Frames (``server/wire/frames.py``) are read back with a small SSE parser written here from the
WHATWG rules, independent of the gateway's and of the test client's, and as WebSocket JSON.
Event ids (``server/wire/eventid.py``) round-trip, keep their order and refuse anything else with
the documented error only; numbers in query parameters and headers (``server/api/params.py``)
are ASCII digits up to their maximum, whatever other scripts' digits, signs, spaces or lengths
come. Both agree with the reference of ``tests/support/params.py``. The WebSocket endpoint's reading of client messages answers any
text or bytes with documented frames, never a crash, both called directly and over a real
socket. ``LV_FUZZ_EXAMPLES`` sets the number of examples per property (default 100).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import jwt
import orjson
import pytest
import redis
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from liveviews.gateway.api.params import number_over, whole_number
from liveviews.gateway.api.sessions import CLOSE_UNAUTHORIZED, Session
from liveviews.gateway.auth import Principal
from liveviews.gateway.errors import BadRequest
from liveviews.gateway.gateway import Gateway
from liveviews.gateway.settings import GatewaySettings
from liveviews.gateway.wire import frames
from liveviews.gateway.wire.eventid import MAX_PART, EventId, position_tuple
from liveviews.store.embedded import free_port
from tests.support.gateway import ServedGateway
from tests.support.params import EVENT_ID_LIKE, EVENT_IDS, NUMBER_LIKE, event_id_ok, number_ok

EXAMPLES = int(os.environ.get("LV_FUZZ_EXAMPLES", "100"))
PROPERTY = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
PROTOCOL = Path(__file__).resolve().parents[2] / "docs" / "PROTOCOL.md"


def documented_codes() -> set[str]:
    section = PROTOCOL.read_text().split("## 2. Errors", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if re.match(r"\| (\d{3}|—) \|", line)]
    return {code for row in rows for code in re.findall(r"`([a-z_]+)`", row.split("|")[2])}


CODES = documented_codes()

# --- an SSE parser after the WHATWG rules, independent of the gateway ----------------------------


@dataclass
class Dispatched:
    event: str
    data: str
    id: str | None


def parse_sse(stream: str) -> list[Dispatched]:
    """Lines end at CRLF, LF or CR; ``field: value`` loses one leading space; a blank line
    dispatches; ``data`` lines join with LF; an ``id`` with NUL is ignored; comments skipped."""
    out: list[Dispatched] = []
    event, data, last_id = "", [], None
    for line in re.split(r"\r\n|\r|\n", stream):
        if line == "":
            if data:
                out.append(Dispatched(event or "message", "\n".join(data), last_id))
            event, data = "", []
            continue
        if line.startswith(":"):
            continue
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if name == "event":
            event = value
        elif name == "data":
            data.append(value)
        elif name == "id" and "\0" not in value:
            last_id = value
    return out


# --- frames ------------------------------------------------------------------------------------

# Keys and values with control characters, line breaks, U+2028/9, NUL and astral characters;
# no lone surrogates, which neither JSON from the store nor a WebSocket text message can carry.
CHARS = st.characters(exclude_categories=("Cs",))
TEXT = st.text(
    st.one_of(
        CHARS,
        st.sampled_from(["\n", "\r", "\x00", "\u2028", "\u2029", "\x85", ":", " "]),
    ),
    max_size=20,
)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False) | TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=12,
)  # fmt: skip
EPOCH = st.from_regex(r"[A-Za-z0-9_-]{1,64}", fullmatch=True)
PART = st.integers(0, MAX_PART)
EVENT_ID = st.builds(lambda e, ms, seq: f"{e}.{ms}-{seq}", EPOCH, PART, PART)
OPS = st.lists(
    st.one_of(
        st.builds(lambda r, v: {"op": "upsert", "row": r, "value": v}, TEXT, JSON),
        st.builds(lambda r: {"op": "delete", "row": r}, TEXT),
    ),
    max_size=4,
)
FRONTIER = st.dictionaries(st.integers(0, 64).map(str), st.builds(lambda a, b: f"{a}-{b}", PART,
                                                                    PART), max_size=4)  # fmt: skip


@st.composite
def any_frame(draw: st.DrawFn) -> tuple[frames.Frame, str, dict[str, Any], str | None]:
    """A frame of every kind the encoder makes, with the data and id it must carry."""
    kind = draw(st.sampled_from([frames.SNAPSHOT, frames.DELTA, frames.PROGRESS, frames.RESET,
                                 frames.END]))  # fmt: skip
    view, key, event_id = draw(TEXT), draw(TEXT), draw(EVENT_ID)
    if kind == frames.SNAPSHOT:
        rows, frontier = draw(st.dictionaries(TEXT, JSON, max_size=4)), draw(FRONTIER)
        data = {"view": view, "key": key, "rows": rows, "frontier": frontier}
        return frames.snapshot(view, key, rows, frontier, event_id), kind, data, event_id
    if kind == frames.DELTA:
        ops = draw(OPS)
        return frames.delta(view, key, ops, event_id), kind, {"view": view, "key": key,
                                                               "ops": ops}, event_id  # fmt: skip
    if kind == frames.PROGRESS:
        frontier = draw(FRONTIER)
        return frames.progress(frontier), kind, {"frontier": frontier}, None
    code, message = draw(TEXT), draw(TEXT)
    if kind == frames.RESET:
        return frames.reset(code, message), kind, {"code": code, "message": message}, None
    last = draw(st.none() | EVENT_ID)
    data = {"code": code, "message": message, "last_event_id": last}
    return frames.end(code, message, last), kind, data, None


def same_json(a: Any, b: Any) -> bool:
    # orjson and json agree on every value here; compare through one canonical form.
    return orjson.dumps(a, option=orjson.OPT_SORT_KEYS) == orjson.dumps(
        b, option=orjson.OPT_SORT_KEYS
    )


@PROPERTY
@given(frame=any_frame())
def test_every_frame_reads_back_as_exactly_one_sse_event(
    frame: tuple[frames.Frame, str, dict[str, Any], str | None],
) -> None:
    f, kind, data, event_id = frame
    events = parse_sse(f.sse.decode())
    assert len(events) == 1, events
    assert events[0].event == kind
    assert events[0].id == event_id
    assert same_json(json.loads(events[0].data), data)
    assert b"\n" not in f.data and b"\r" not in f.data


@PROPERTY
@given(frame=any_frame(), sub=st.none() | TEXT)
def test_every_frame_reads_back_as_one_websocket_message(
    frame: tuple[frames.Frame, str, dict[str, Any], str | None], sub: str | None
) -> None:
    f, kind, data, event_id = frame
    msg = json.loads(f.ws(sub))
    expected: dict[str, Any] = {"type": kind, "data": data}
    if sub is not None:
        expected["sub"] = sub
    if event_id is not None:
        expected["id"] = event_id
    assert same_json(msg, expected)


@PROPERTY
@given(kind=TEXT, event_id=TEXT, data=JSON)
def test_no_id_or_kind_can_forge_another_sse_field_or_event(
    kind: str, event_id: str, data: Any
) -> None:
    """Line breaks are taken out of ids and kinds, so a value can never start a new field."""
    f = frames.Frame(kind, orjson.dumps(data), event_id)
    events = parse_sse(f.sse.decode())
    assert len(events) == 1
    flat = event_id.replace("\r", "").replace("\n", "")
    assert events[0].id == (None if "\0" in flat else flat)
    assert events[0].event == (kind.replace("\r", "").replace("\n", "") or "message")
    assert same_json(json.loads(events[0].data), data)


@PROPERTY
@given(
    code=TEXT,
    message=TEXT,
    sub=st.none() | TEXT,
    req=st.none() | TEXT,
    extra=st.dictionaries(st.sampled_from(["index", "field", "last_event_id"]), JSON),
)
def test_websocket_errors_and_replies_read_back(
    code: str, message: str, sub: str | None, req: str | None, extra: dict[str, Any]
) -> None:  # fmt: skip
    msg = json.loads(frames.ws_error(code, message, sub=sub, req=req, **extra))
    expected = {"type": "error", "code": code, "message": message,
                **({"sub": sub} if sub is not None else {}), **({"req": req} if req else {}),
                **{k: v for k, v in extra.items() if v is not None}}  # fmt: skip
    if req == "":
        expected["req"] = ""
    assert same_json(msg, expected)
    reply = json.loads(frames.ws_message("unsubscribed", sub=sub))
    assert reply == ({"type": "unsubscribed", "sub": sub} if sub is not None
                     else {"type": "unsubscribed"})  # fmt: skip


# --- event ids ---------------------------------------------------------------------------------


@PROPERTY
@given(epoch=EPOCH, ms=PART, seq=PART)
def test_an_event_id_round_trips(epoch: str, ms: int, seq: int) -> None:
    assume((ms, seq) != (MAX_PART, MAX_PART))
    event_id = EventId(epoch, f"{ms}-{seq}")
    assert EventId.parse(str(event_id)) == event_id
    # Leading zeros are read as the same position.
    assert EventId.parse(f"{epoch}.{ms:020d}-{seq:05d}") == event_id


@PROPERTY
@given(epoch=EPOCH, a=st.tuples(PART, PART), b=st.tuples(PART, PART))
def test_event_ids_keep_the_order_of_their_positions(
    epoch: str, a: tuple[int, int], b: tuple[int, int]
) -> None:
    assume(a != (MAX_PART, MAX_PART) and b != (MAX_PART, MAX_PART))
    pa = EventId.parse(f"{epoch}.{a[0]}-{a[1]}").position
    pb = EventId.parse(f"{epoch}.{b[0]}-{b[1]}").position
    assert (position_tuple(pa) < position_tuple(pb)) == (a < b)
    assert (position_tuple(pa) == position_tuple(pb)) == (a == b)


ID_LIKE = st.builds(
    lambda e, sep, ms, dash, seq: f"{e}{sep}{ms}{dash}{seq}",
    st.text(max_size=70), st.sampled_from([".", "", "..", ":"]),
    st.text("0123456789\u0661\uff11-+ e", max_size=24) | PART.map(str) | st.integers().map(str),
    st.sampled_from(["-", "", "--", "."]),
    st.text("0123456789\u0661 ", max_size=24) | PART.map(str),
)  # fmt: skip


@PROPERTY
@given(raw=st.text(CHARS) | ID_LIKE | EVENT_ID_LIKE | st.sampled_from(EVENT_IDS).filter(
    lambda r: isinstance(r, str)))  # fmt: skip
def test_anything_else_is_refused_with_the_documented_error_only(raw: str) -> None:
    try:
        parsed = EventId.parse(raw)
    except BadRequest as exc:
        assert exc.code == "invalid_last_event_id" and exc.status == 400
        assert exc.code in CODES and exc.message
        return
    # Accepted: then it is of the documented form, and names a position the store can read.
    match = re.fullmatch(r"([A-Za-z0-9_-]{1,64})\.([0-9]{1,20})-([0-9]{1,20})", raw)
    assert match is not None, raw
    ms, seq = int(match[2]), int(match[3])
    assert ms <= MAX_PART and seq <= MAX_PART
    assert parsed == EventId(match[1], f"{ms}-{seq}")
    assert event_id_ok(raw), raw  # the reference of tests/support/params.py agrees


@pytest.mark.parametrize(
    "raw",
    ["", "e", "e.1", "e.1-", "e.-1", "e.1-2-3", "e.1-2 ", " e.1-2", "e 1.1-2", "e.+1-2",
     "e.\u0661-0", "e.1-\uff11", "e.18446744073709551616-0", "e.0-18446744073709551616",
     "e.18446744073709551615-18446744073709551615", "e.1-2\n", "e\n.1-2", "é.1-2",
     "x" * 65 + ".1-2", "e.1-2\x00", "e." + "9" * 21 + "-0", "e.²-0", "e.1-٣", "e.𝟙-0",
     "e.+0-0", "e. 1-0", "e.1-0\t", "e.1_0-0", "e.0x1-0", "e." + "9" * 5000 + "-0"],
)  # fmt: skip
def test_malformed_event_ids_are_refused(raw: str) -> None:
    with pytest.raises(BadRequest) as caught:
        EventId.parse(raw)
    assert caught.value.code == "invalid_last_event_id"


# --- numbers in query parameters and headers (server/api/params.py) ----------------------------


@PROPERTY
@given(raw=NUMBER_LIKE | st.text(CHARS, max_size=12), maximum=st.integers(0, 2**64))
def test_a_number_is_ascii_digits_up_to_its_maximum_and_nothing_else(
    raw: str, maximum: int
) -> None:
    """Other scripts' digits, signs, spaces, "_", NUL and numbers of any length: never an
    error of its own, and a number exactly where the reference (PROTOCOL.md) says so."""
    value = whole_number(raw, maximum)
    assert (value is not None) == number_ok(raw, maximum), raw
    if value is not None:
        assert 0 <= value <= maximum and value == int(raw.lstrip("0") or "0")
    assert number_over(raw, maximum) == (
        re.fullmatch(r"[0-9]+", raw) is not None and not number_ok(raw, maximum)
    )


# --- client messages over WebSocket ------------------------------------------------------------


class RecordingSocket:
    """The transport edge of one connection (``liveviews.gateway.live.sockets.Socket``): what the gateway
    sends, and whether it closed."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []
        self.closed: int | None = None
        self.unsent = False

    @property
    def closing(self) -> bool:
        return self.closed is not None

    def send(self, payload: bytes) -> bool:
        if self.closed is not None:
            return False
        msg = json.loads(payload)
        assert isinstance(msg, dict), payload
        self.sent.append(msg)
        return True

    def close(self, code: int, reason: str = "", wait: float | None = None) -> None:
        if self.closed is None:
            self.closed = code

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def tick(self, now: float) -> None:
        pass


def gateway_settings(store_url: str) -> GatewaySettings:
    return GatewaySettings.from_env({
        "REDIS_URL": store_url, "LV_PORT": str(free_port()), "LV_LOG_PARTITIONS": "4",
        "LV_CHANGE_SHARDS": "8", "LV_FEED_BLOCK_MS": "100", "LV_HEARTBEAT_SECONDS": "1",
        "LV_MAX_BODY_BYTES": "65536", "LV_WS_AUTH_TIMEOUT_SECONDS": "2",
    })  # fmt: skip


@pytest.fixture()
def loop_and_gateway(store: redis.Redis, store_url: str) -> Iterator[tuple[Any, Gateway]]:
    """A gateway (not serving: its endpoints are called directly) on one event loop."""
    loop = asyncio.new_event_loop()
    gw = Gateway(gateway_settings(store_url))
    yield loop, gw
    loop.run_until_complete(gw.client.aclose())
    loop.run_until_complete(gw.feed_client.aclose())
    loop.close()


VIEWS = st.sampled_from(["profiles", "likes", "tweets", "timeline", "activity", "nope", ""])
FIELD_VALUES = JSON | EVENT_ID | EVENT_ID_LIKE | VIEWS | st.just("alice")
MESSAGE = st.one_of(
    st.binary(max_size=64).map(lambda b: b.decode("utf-8", "replace")),  # as the endpoint reads
    st.text(CHARS, max_size=64),
    JSON.map(lambda v: orjson.dumps(v).decode()),
    st.fixed_dictionaries(
        {"type": st.sampled_from(["auth", "subscribe", "unsubscribe", "publish", "nope"]) | JSON},
        optional={"sub": FIELD_VALUES, "view": FIELD_VALUES, "key": FIELD_VALUES,
                  "last_event_id": FIELD_VALUES, "req": FIELD_VALUES, "token": FIELD_VALUES,
                  "events": FIELD_VALUES | st.lists(st.fixed_dictionaries(
                      {"type": st.sampled_from(["like", "profile_set"]) | TEXT,
                       "payload": JSON | st.fixed_dictionaries({"user": FIELD_VALUES},
                                                               optional={"tweet": FIELD_VALUES,
                                                                         "name": FIELD_VALUES})},
                      optional={"time": JSON}), max_size=3)},
    ).map(lambda d: orjson.dumps(d).decode()),
)  # fmt: skip
REPLIES = {"error", "authenticated", "unsubscribed", "published"}


def check_replies(sock: RecordingSocket) -> None:
    for msg in sock.sent:
        assert msg.get("type") in REPLIES, msg
        if msg["type"] == "error":
            assert msg["code"] in CODES, msg
            assert isinstance(msg["message"], str) and msg["message"], msg


@PROPERTY
@given(messages=st.lists(MESSAGE, min_size=1, max_size=5), signed_in=st.booleans())
def test_any_client_message_is_answered_with_documented_frames(
    loop_and_gateway: tuple[Any, Gateway], messages: list[str], signed_in: bool
) -> None:
    loop, gw = loop_and_gateway

    async def go() -> None:
        sock = RecordingSocket()
        conn = Session(gw, sock, gw.admission.admit("ws", None, None))
        if signed_in:
            conn.principal = Principal("alice", frozenset({"read", "publish"}), time.time() + 600)
        try:
            for text in messages:
                await conn._handle(text.encode())
                if sock.closed is not None:
                    # Only a refused sign-in closes the socket, with the documented code.
                    assert not signed_in and sock.closed == CLOSE_UNAUTHORIZED
                    break
        finally:
            tasks = [t for st in conn.senders.values() if (t := st._task) is not None]
            for stream in list(conn.senders.values()):
                stream.finish()
            await asyncio.gather(*tasks, return_exceptions=True)
        check_replies(sock)
        if not signed_in:
            assert not [m for m in sock.sent if m["type"] == "published"]

    loop.run_until_complete(go())


# --- garbage over a real socket ----------------------------------------------------------------


@pytest.fixture(scope="module")
def served(store_url: str) -> Iterator[ServedGateway]:
    gw = ServedGateway(gateway_settings(store_url)).start()
    yield gw
    gw.stop()


GARBAGE_TEXT = [
    "", " ", "null", "[]", "[1,2]", "\"auth\"", "42", "{", "}", "{\"type\":", "\x00\x01",
    "{\"type\": null}", "{\"type\": \"subscribe\"}", "{\"type\": \"subscribe\", \"sub\": \"\"}",
    "{\"type\": \"subscribe\", \"sub\": \"" + "s" * 65 + "\", \"view\": \"profiles\", \"key\": \"a\"}",
    "{\"type\": \"subscribe\", \"sub\": 1, \"view\": \"profiles\", \"key\": \"a\"}",
    "{\"type\": \"subscribe\", \"sub\": \"x\", \"view\": [], \"key\": {}}",
    "{\"type\": \"subscribe\", \"sub\": \"x\", \"view\": \"profiles\", \"key\": \"a\", "
    "\"last_event_id\": \"e.99999999999999999999-0\"}",
    "{\"type\": \"unsubscribe\", \"sub\": \"never\"}", "{\"type\": \"publish\", \"events\": []}",
    "{\"type\": \"publish\", \"req\": \"r\", \"events\": {\"a\": 1}}",
    "{\"type\": \"auth\", \"token\": 5}", "[" * 2000 + "]" * 2000, "\ud800".encode("utf-8",
    "surrogatepass").decode("utf-8", "replace"), "{\"type\": \"" + "x" * 10_000 + "\"}",
]  # fmt: skip
GARBAGE_BYTES = [b"", b"\xff\xfe\xfd", b"\x00" * 16, b'{"type": "subscribe"', b"\xc0\xae"]


async def test_garbage_over_a_real_socket_is_answered_and_the_socket_still_serves(
    served: Any, store: redis.Redis
) -> None:
    async with aiohttp.ClientSession() as s:
        token = jwt.encode({"sub": "alice", "scope": "read publish", "aud": "liveviews",
                            "exp": int(time.time()) + 600}, served.settings.jwt_secret,
                           algorithm="HS256")  # fmt: skip
        ws = await s.ws_connect(served.ws_url, params={"access_token": token})
        assert json.loads((await ws.receive()).data)["type"] == "authenticated"
        for text in GARBAGE_TEXT:
            await ws.send_str(text)
        for raw in GARBAGE_BYTES:
            await ws.send_bytes(raw)
        errors = []
        async with asyncio.timeout(10):
            while len(errors) < len(GARBAGE_TEXT) + len(GARBAGE_BYTES):
                m = await ws.receive()
                assert m.type == aiohttp.WSMsgType.TEXT, (m.type, ws.close_code)
                msg = json.loads(m.data)
                if msg["type"] != "heartbeat":
                    errors.append(msg)
        assert {m["type"] for m in errors} == {"error"}, errors
        assert {m["code"] for m in errors} <= CODES
        await ws.send_str(json.dumps({"type": "subscribe", "sub": "a", "view": "profiles",
                                      "key": "alice"}))  # fmt: skip
        async with asyncio.timeout(10):
            while (msg := json.loads((await ws.receive()).data))["type"] == "heartbeat":
                pass
        assert (msg["type"], msg["sub"]) == ("snapshot", "a")
        await ws.close()
