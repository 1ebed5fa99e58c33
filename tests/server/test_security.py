"""Attacks on the gateway, each refused with its documented status and code (docs/PROTOCOL.md).

Bad tokens on every way in, reading another user's timeline by every path (resume included),
and publishing as someone else (cross-origin requests: ``api/test_cors.py``; static paths that
try to leave the served directories: ``api/test_static_paths.py``). Every test runs against a real uvicorn over the real store and checks not
only the refusal but that nothing leaked out (no row, no frame, no file) and nothing was
written to the log.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import time
from collections.abc import Callable
from typing import Any

import aiohttp
import jwt
import orjson
import pytest
import redis

from liveviews.log.events import log_stream
from tests.support.gateway import ServedGateway, Writer
from tests.support.gateway_settings import PARTITIONS

# The HS512 token is signed with the gateway's 44-byte secret on purpose.
pytestmark = pytest.mark.filterwarnings("ignore::jwt.warnings.InsecureKeyLengthWarning")

# --- tokens -----------------------------------------------------------------------------------

WRONG_SECRET = "another-secret-of-the-right-length-for-hs256"


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _claims(gw: ServedGateway, **over: Any) -> dict[str, Any]:
    claims = {"sub": "alice", "scope": "read publish", "aud": gw.settings.jwt_audience,
              "exp": int(time.time()) + 600}  # fmt: skip
    claims.update(over)
    return {k: v for k, v in claims.items() if v is not None}


def _hand_signed(header: dict[str, Any], claims: dict[str, Any], key: bytes | None) -> str:
    signing_input = f"{_b64(orjson.dumps(header))}.{_b64(orjson.dumps(claims))}"
    if key is None:
        return signing_input + "."
    mac = hmac.new(key, signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{_b64(mac)}"


def _truncated(gw: ServedGateway) -> str:
    token = gw.token("alice")
    return token[: token.rindex(".") + 5]


BAD_TOKENS: dict[str, tuple[Callable[[ServedGateway], str], str]] = {
    # Right claims, signed with a secret that is not the gateway's.
    "forged": (lambda gw: jwt.encode(_claims(gw), WRONG_SECRET, algorithm="HS256"),
               "token_invalid"),
    "expired": (lambda gw: gw.token("alice", ttl=-30), "token_expired"),
    "wrong_audience": (lambda gw: gw.token("alice", aud="another-gateway"), "token_invalid"),
    # Unsigned: header alg none, empty signature.
    "alg_none": (lambda gw: _hand_signed({"alg": "none", "typ": "JWT"}, _claims(gw), None),
                 "token_invalid"),
    # Right secret, another HMAC algorithm.
    "alg_hs512": (lambda gw: jwt.encode(_claims(gw), gw.settings.jwt_secret, algorithm="HS512"),
                  "token_invalid"),
    # Algorithm confusion: an RS256 header over an HMAC-SHA256 signature made with the secret.
    "alg_rs256_header": (lambda gw: _hand_signed({"alg": "RS256", "typ": "JWT"}, _claims(gw),
                                                 gw.settings.jwt_secret.encode()),
                         "token_invalid"),
    "malformed": (lambda gw: "this-is-not.a-jwt", "token_invalid"),
    "truncated_signature": (_truncated, "token_invalid"),
    "no_sub": (lambda gw: jwt.encode(_claims(gw, sub=None), gw.settings.jwt_secret,
                                     algorithm="HS256"), "token_invalid"),
    "empty_sub": (lambda gw: gw.token(""), "token_invalid"),
    "no_exp": (lambda gw: jwt.encode(_claims(gw, exp=None), gw.settings.jwt_secret,
                                     algorithm="HS256"), "token_invalid"),
    "not_yet_valid": (lambda gw: gw.token("alice", nbf=int(time.time()) + 600), "token_invalid"),
}  # fmt: skip
TOKEN_KINDS = sorted(BAD_TOKENS)

PROFILE = {"type": "profile_set", "payload": {"user": "alice", "name": "Alice"}}
BOBS_PROFILE = {"type": "profile_set", "payload": {"user": "bob", "name": "Not Bob"}}
SECRET_ROW_TEXT = "bob's private timeline row 7f3c"


def log_length(store: redis.Redis) -> int:
    return sum(store.xlen(log_stream(p)) for p in range(PARTITIONS))


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def error_of(resp: aiohttp.ClientResponse) -> tuple[int, str]:
    body = await resp.json(content_type=None)
    assert set(body) >= {"code", "message"} and body["message"], body
    return resp.status, body["code"]


class Socket:
    """A WebSocket client that records every message it received."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.seen: list[dict[str, Any]] = []

    async def send(self, **msg: Any) -> None:
        await self.ws.send_str(json.dumps(msg))

    async def next(self, timeout: float = 10) -> dict[str, Any]:
        """The next message that is not a heartbeat, or ``{"type": "closed", "code"}``."""
        async with asyncio.timeout(timeout):
            while True:
                m = await self.ws.receive()
                if m.type != aiohttp.WSMsgType.TEXT:
                    return {"type": "closed", "code": self.ws.close_code}
                msg: dict[str, Any] = json.loads(m.data)
                self.seen.append(msg)
                if msg["type"] != "heartbeat":
                    return msg

    async def quiet_for(self, seconds: float) -> None:
        """Reads for ``seconds``; fails if anything but a heartbeat or progress arrives."""
        with pytest.raises(TimeoutError):
            while True:
                msg = await self.next(timeout=seconds)
                assert msg["type"] in ("progress",), msg


async def ws_connect(s: aiohttp.ClientSession, gw: ServedGateway, token: str | None) -> Socket:
    params = {"access_token": token} if token is not None else None
    return Socket(await s.ws_connect(gw.ws_url, params=params))


# --- 1. tokens, on each way in ------------------------------------------------------------------


@pytest.mark.parametrize("kind", TOKEN_KINDS)
async def test_bad_token_is_refused_on_snapshot_get(
    gateway: ServedGateway, store: redis.Redis, kind: str
) -> None:
    make, code = BAD_TOKENS[kind]

    async with aiohttp.ClientSession() as s:
        resp = await s.get(gateway.url + "/v1/views/profiles/alice",
                           headers=bearer(make(gateway)))  # fmt: skip
        assert await error_of(resp) == (401, code)
        assert resp.headers["WWW-Authenticate"] == "Bearer"


@pytest.mark.parametrize("kind", TOKEN_KINDS)
async def test_bad_token_is_refused_on_sse_live(
    gateway: ServedGateway, store: redis.Redis, kind: str
) -> None:
    make, code = BAD_TOKENS[kind]

    async with aiohttp.ClientSession() as s:
        url = gateway.url + "/v1/views/profiles/alice/live"
        by_header = await s.get(url, headers=bearer(make(gateway)))
        assert await error_of(by_header) == (401, code)
        by_query = await s.get(url, params={"access_token": make(gateway)})
        assert await error_of(by_query) == (401, code)
    async with aiohttp.ClientSession(cookies={"lv_token": make(gateway)}) as s:
        by_cookie = await s.get(url)
        assert await error_of(by_cookie) == (401, code)


@pytest.mark.parametrize("kind", TOKEN_KINDS)
async def test_bad_token_is_refused_on_ws_connect(
    gateway: ServedGateway, store: redis.Redis, kind: str
) -> None:
    make, code = BAD_TOKENS[kind]

    async with aiohttp.ClientSession() as s:
        sock = await ws_connect(s, gateway, make(gateway))
        refusal = await sock.next()
        assert (refusal["type"], refusal["code"]) == ("error", code)
        assert await sock.next() == {"type": "closed", "code": 4401}


@pytest.mark.parametrize("kind", TOKEN_KINDS)
async def test_bad_token_is_refused_in_ws_auth_message(
    gateway: ServedGateway, store: redis.Redis, kind: str
) -> None:
    """The auth message is refused and the socket closed at once; what follows is not served."""
    make, code = BAD_TOKENS[kind]

    before = log_length(store)
    async with aiohttp.ClientSession() as s:
        sock = await ws_connect(s, gateway, None)
        # Sent back to back, so the subscribe and the publish are already on the wire.
        await sock.send(type="auth", token=make(gateway))
        await sock.send(type="subscribe", sub="a", view="profiles", key="alice")
        await sock.send(type="publish", req="r", events=[PROFILE])
        refusal = await sock.next()
        assert (refusal["type"], refusal["code"]) == ("error", code)
        assert await sock.next() == {"type": "closed", "code": 4401}
        assert not [m for m in sock.seen if m["type"] in ("snapshot", "published")]
    assert log_length(store) == before


@pytest.mark.parametrize("kind", TOKEN_KINDS)
async def test_bad_token_is_refused_on_publish(
    gateway: ServedGateway, store: redis.Redis, kind: str
) -> None:
    make, code = BAD_TOKENS[kind]

    async with aiohttp.ClientSession() as s:
        resp = await s.post(gateway.url + "/v1/events", json=PROFILE,
                            headers=bearer(make(gateway)))  # fmt: skip
        assert await error_of(resp) == (401, code)
    assert log_length(store) == 0


async def test_a_bad_refresh_does_not_sign_an_open_socket_in_as_anyone_else(
    gateway: ServedGateway, store: redis.Redis
) -> None:
    """A refresh naming another subject is refused; the socket stays alice's."""

    async with aiohttp.ClientSession() as s:
        sock = await ws_connect(s, gateway, gateway.token("alice"))
        assert (await sock.next())["subject"] == "alice"
        await sock.send(type="auth", token=gateway.token("bob"))
        refused = await sock.next()
        assert (refused["type"], refused["code"]) == ("error", "subject_changed")
        await sock.send(type="subscribe", sub="t", view="timeline", key="bob")
        denied = await sock.next()
        assert (denied["type"], denied["sub"], denied["code"]) == ("error", "t", "forbidden")


# --- 2. another user's timeline, by every path --------------------------------------------------


@pytest.fixture()
async def bobs_timeline(gateway: ServedGateway, store: redis.Redis, writer: Writer) -> str:
    """Bob's timeline holds a row; returns an event id of it, as Bob received it."""
    writer.write([("timeline", "bob", "bob:1", {"text": SECRET_ROW_TEXT, "score": 1})])
    async with aiohttp.ClientSession() as s:
        resp = await s.get(gateway.url + "/v1/views/timeline/bob",
                           headers=gateway.headers("bob"))  # fmt: skip
        body = await resp.json()
        assert resp.status == 200 and SECRET_ROW_TEXT in json.dumps(body["rows"])
        position: str = body["position"]
        return position


def _from_the_start(event_id: str) -> str:
    """The same epoch at position 0-0: a resume that would replay the key's whole history."""
    return event_id.split(".", 1)[0] + ".0-0"


ANOTHER_USERS_TIMELINE = [
    # (the read, how it names an event id of Bob's to resume from, which id)
    ("snapshot", None, None),
    ("sse", None, None),
    ("sse", "Last-Event-ID header", "as_received"),
    ("sse", "Last-Event-ID header", "from_the_start"),
    ("sse", "last_event_id parameter", "as_received"),
    ("sse", "last_event_id parameter", "from_the_start"),
]


@pytest.mark.parametrize(("read", "resume_by", "crafted"), ANOTHER_USERS_TIMELINE)
async def test_reading_another_users_timeline_is_forbidden(
    gateway: ServedGateway,
    bobs_timeline: str,
    read: str,
    resume_by: str | None,
    crafted: str | None,
) -> None:
    path = "/v1/views/timeline/bob" + ("/live" if read == "sse" else "")
    headers, params = gateway.headers(), {}
    if crafted is not None:
        event_id = bobs_timeline if crafted == "as_received" else _from_the_start(bobs_timeline)
        if resume_by == "Last-Event-ID header":
            headers["Last-Event-ID"] = event_id
        else:
            params["last_event_id"] = event_id

    async with aiohttp.ClientSession() as s:
        resp = await s.get(gateway.url + path, headers=headers, params=params)
        assert SECRET_ROW_TEXT not in await resp.text()
        assert await error_of(resp) == (403, "forbidden")
        if read == "snapshot":
            assert "ETag" not in resp.headers


@pytest.mark.parametrize("crafted", [None, "as_received", "from_the_start"])
async def test_ws_subscribe_to_another_users_timeline_is_forbidden(
    gateway: ServedGateway, writer: Writer, bobs_timeline: str, crafted: str | None
) -> None:
    """Refused with the sub's error frame; a later change of Bob's timeline never reaches Alice."""
    resume = {None: None, "as_received": bobs_timeline,
              "from_the_start": _from_the_start(bobs_timeline)}[crafted]  # fmt: skip

    async with aiohttp.ClientSession() as s:
        sock = await ws_connect(s, gateway, gateway.token("alice"))
        assert (await sock.next())["type"] == "authenticated"
        await sock.send(type="subscribe", sub="t", view="timeline", key="bob",
                        **({"last_event_id": resume} if resume else {}))  # fmt: skip
        denied = await sock.next()
        assert (denied["type"], denied["sub"], denied["code"]) == ("error", "t", "forbidden")
        writer.write([("timeline", "bob", "bob:2", {"text": SECRET_ROW_TEXT, "score": 2})])
        await sock.quiet_for(1.5)
        assert SECRET_ROW_TEXT not in json.dumps(sock.seen)
        assert not [m for m in sock.seen if m["type"] in ("snapshot", "delta", "reset")]
        # The socket itself is still good for what Alice may read.
        await sock.send(type="subscribe", sub="t", view="timeline", key="alice")
        assert (await sock.next())["type"] == "snapshot"


async def test_the_log_feed_that_shows_every_event_does_not_exist_in_production(
    tight_gateway: ServedGateway,
) -> None:
    async with aiohttp.ClientSession() as s:
        resp = await s.get(tight_gateway.url + "/v1/log/live",
                           headers=tight_gateway.headers())  # fmt: skip
        assert await error_of(resp) == (404, "not_found")


# --- 3. publishing as someone else --------------------------------------------------------------

AS_BOB = [
    ("profile", [BOBS_PROFILE]),
    ("follow_as_bob", [{"type": "follow", "payload": {"user": "bob", "followee": "alice"}}]),
    ("tweet_as_bob", [{"type": "tweet_posted",
                       "payload": {"user": "bob", "tweet": "bob:9", "text": "hi"}}]),
    ("own_then_bobs", [PROFILE, BOBS_PROFILE]),
]  # fmt: skip


@pytest.mark.parametrize(("name", "events"), AS_BOB, ids=[a[0] for a in AS_BOB])
async def test_http_publish_as_someone_else_is_refused_and_writes_nothing(
    gateway: ServedGateway, store: redis.Redis, name: str, events: list[dict[str, Any]]
) -> None:
    before = log_length(store)
    async with aiohttp.ClientSession() as s:
        resp = await s.post(gateway.url + "/v1/events", json=events,
                            headers=gateway.headers("alice"))  # fmt: skip
        body = await resp.json()
        assert await error_of(resp) == (403, "not_author")
        assert body["index"] == len(events) - 1
    assert log_length(store) == before


@pytest.mark.parametrize(("name", "events"), AS_BOB, ids=[a[0] for a in AS_BOB])
async def test_ws_publish_as_someone_else_is_refused_and_writes_nothing(
    gateway: ServedGateway, store: redis.Redis, name: str, events: list[dict[str, Any]]
) -> None:
    before = log_length(store)
    async with aiohttp.ClientSession() as s:
        sock = await ws_connect(s, gateway, gateway.token("alice"))
        assert (await sock.next())["type"] == "authenticated"
        await sock.send(type="publish", req="r1", events=events)
        refused = await sock.next()
        assert (refused["type"], refused["req"], refused["code"]) == (
            "error",
            "r1",
            "not_author",
        )
        assert refused["index"] == len(events) - 1
    assert log_length(store) == before


async def test_publish_without_the_publish_scope_is_refused_and_writes_nothing(
    gateway: ServedGateway, store: redis.Redis
) -> None:
    async with aiohttp.ClientSession() as s:
        resp = await s.post(gateway.url + "/v1/events", json=PROFILE,
                            headers=gateway.headers("alice", scope="read"))  # fmt: skip
        assert await error_of(resp) == (403, "insufficient_scope")
        sock = await ws_connect(s, gateway, gateway.token("alice", scope="read"))
        assert (await sock.next())["type"] == "authenticated"
        await sock.send(type="publish", req="r1", events=[PROFILE])
        refused = await sock.next()
        assert (refused["req"], refused["code"]) == ("r1", "insufficient_scope")
    assert log_length(store) == 0
