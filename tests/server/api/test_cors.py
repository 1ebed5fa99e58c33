"""Cross-origin requests to a gateway with ``LV_CORS_ORIGINS``: refused in the gateway's error
shape, and no allow-origin for an origin not listed. The ``lv_token`` cookie changes nothing
for a page of another origin (403 ``origin_refused``), and a JSON endpoint takes only JSON (415),
so no form-like request a page can send unasked reaches it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import aiohttp
import orjson
import pytest
import redis

from liveviews.log.events import log_stream
from tests.support.gateway import ServedGateway
from tests.support.gateway_settings import PARTITIONS

# --- cross-origin requests -------------------------------------------------------------------

ALLOWED_ORIGIN = "http://chirp.example"
DISALLOWED_ORIGINS = [
    "http://evil.example",
    "null",
    "http://chirp.example.evil.example",
    "https://chirp.example",
    "http://chirp.example:8080",
]


async def preflight(
    gw: ServedGateway, origin: str, headers: str = "authorization, content-type"
) -> aiohttp.ClientResponse:
    async with aiohttp.ClientSession() as s:
        resp = await s.options(gw.url + "/v1/events", headers={
            "Origin": origin, "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": headers})  # fmt: skip
        await resp.read()
        return resp


def refusal(resp: aiohttp.ClientResponse) -> dict[str, Any]:
    assert resp.status == 400
    assert resp.headers["Content-Type"] == "application/json"
    body = orjson.loads(resp._body or b"")
    assert body["code"] == "cors_refused"
    assert "LV_CORS_ORIGINS" in body["message"]
    return body


@pytest.mark.parametrize("origin", DISALLOWED_ORIGINS)
async def test_cors_preflight_from_a_disallowed_origin_is_not_allowed(
    tight_gateway: ServedGateway, origin: str
) -> None:
    resp = await preflight(tight_gateway, origin)
    # Without Access-Control-Allow-Origin a browser refuses the response whatever else it says.
    assert "Access-Control-Allow-Origin" not in resp.headers
    assert refusal(resp)["refused"] == ["origin"]


async def test_cors_preflight_asking_for_a_header_not_allowed_is_refused_in_the_error_shape(
    tight_gateway: ServedGateway,
) -> None:
    resp = await preflight(tight_gateway, ALLOWED_ORIGIN, "authorization, x-debug")
    assert refusal(resp)["refused"] == ["headers"]


async def test_cors_preflight_from_the_allowed_origin_is_allowed(
    tight_gateway: ServedGateway,
) -> None:
    resp = await preflight(tight_gateway, ALLOWED_ORIGIN)
    assert resp.status == 200
    assert resp.headers["Access-Control-Allow-Origin"] == ALLOWED_ORIGIN
    assert resp.headers["Access-Control-Allow-Credentials"] == "true"
    assert "POST" in resp.headers["Access-Control-Allow-Methods"]


@pytest.mark.parametrize("origin", DISALLOWED_ORIGINS)
async def test_cors_simple_get_from_a_disallowed_origin_carries_no_allow_origin(
    tight_gateway: ServedGateway, store: redis.Redis, origin: str
) -> None:
    async with aiohttp.ClientSession() as s:
        for path in ("/healthz", "/v1/views/profiles/alice"):
            resp = await s.get(
                tight_gateway.url + path, headers={**tight_gateway.headers(), "Origin": origin}
            )
            await resp.read()
            assert "Access-Control-Allow-Origin" not in resp.headers, path
        allowed = await s.get(tight_gateway.url + "/healthz",
                              headers={"Origin": ALLOWED_ORIGIN})  # fmt: skip
        assert allowed.headers["Access-Control-Allow-Origin"] == ALLOWED_ORIGIN


# --- the lv_token cookie is not a cross-site credential ----------------------------------------

PROFILE = {"type": "profile_set", "payload": {"user": "alice", "name": "Alice"}}
EVIL = "http://evil.example"


def log_length(store: redis.Redis) -> int:
    return sum(store.xlen(log_stream(p)) for p in range(PARTITIONS))


def cookie(gw: ServedGateway, user: str = "alice") -> dict[str, str]:
    return {"Cookie": f"lv_token={gw.token(user)}"}


async def publish(gw: ServedGateway, headers: dict[str, str], params: Any = None,
                  content_type: str = "application/json") -> tuple[int, dict[str, Any]]:  # fmt: skip
    async with aiohttp.ClientSession() as s:
        resp = await s.post(gw.url + "/v1/events", data=orjson.dumps(PROFILE), params=params,
                            headers={"Content-Type": content_type, **headers})  # fmt: skip
        return resp.status, await resp.json(content_type=None)


# What a page on another origin can make a browser send with the user's cookie and no
# preflight: a form-like POST (text/plain) or a fetch whose JSON body a preflight would stop
# only if the browser asked first.
@pytest.mark.parametrize("content_type", ["text/plain", "application/json"])
@pytest.mark.parametrize(
    "sent",
    [{"Origin": EVIL}, {"Origin": "null"}, {"Referer": EVIL + "/page.html"}, {}],
    ids=["evil_origin", "null_origin", "evil_referer", "no_origin_nor_referer"],
)
async def test_a_cookie_publish_from_another_origin_is_refused_and_writes_nothing(
    gateway: ServedGateway, store: redis.Redis, sent: dict[str, str], content_type: str
) -> None:
    status, body = await publish(gateway, {**cookie(gateway), **sent}, content_type=content_type)
    assert (status, body["code"]) == (403, "origin_refused"), body
    assert "Authorization" in body["message"]
    assert log_length(store) == 0


async def test_a_cookie_publish_from_a_listed_origin_is_refused_elsewhere_but_not_there(
    tight_gateway: ServedGateway, store: redis.Redis
) -> None:
    refused, body = await publish(tight_gateway, {**cookie(tight_gateway), "Origin": EVIL})
    assert (refused, body["code"]) == (403, "origin_refused")
    assert "LV_CORS_ORIGINS" in body["message"]
    allowed, _ = await publish(tight_gateway, {**cookie(tight_gateway), "Origin": ALLOWED_ORIGIN})
    assert allowed == 202
    assert log_length(store) == 1


@pytest.mark.parametrize(
    "sent",
    [
        lambda gw: {"Origin": gw.url},
        lambda gw: {"Origin": gw.url.replace("http://", "https://")},  # behind a TLS proxy
        lambda gw: {"Referer": gw.url + "/index.html?user=alice"},
        lambda gw: {"Origin": "https://app.example", "Sec-Fetch-Site": "same-origin"},
    ],
    ids=["same_origin", "same_host_other_scheme", "same_origin_referer", "sec_fetch_site"],
)
async def test_a_cookie_publish_from_the_gateways_own_pages_is_accepted(
    gateway: ServedGateway, store: redis.Redis, sent: Callable[[ServedGateway], dict[str, str]]
) -> None:
    status, body = await publish(gateway, {**cookie(gateway), **sent(gateway)})
    assert status == 202, body
    assert log_length(store) == 1


async def test_a_token_the_page_sends_itself_is_not_held_to_the_pages_origin(
    gateway: ServedGateway, store: redis.Redis
) -> None:
    """A page that holds a token and sends it is not a browser acting on its own: the header
    and the query parameter, which win over a cookie sent beside them, are taken from any
    origin."""
    by_header, _ = await publish(gateway, {**gateway.headers(), **cookie(gateway, "mallory"),
                                           "Origin": EVIL})  # fmt: skip
    by_query, _ = await publish(gateway, {**cookie(gateway, "mallory"), "Origin": EVIL},
                                params={"access_token": gateway.token("alice")})  # fmt: skip
    assert (by_header, by_query) == (202, 202)
    assert log_length(store) == 2


async def test_reads_with_the_cookie_are_not_held_to_an_origin(
    gateway: ServedGateway, store: redis.Redis
) -> None:
    """A GET changes nothing, and CORS keeps its answer from a page of another origin."""
    async with aiohttp.ClientSession() as s:
        resp = await s.get(gateway.url + "/v1/views/profiles/alice",
                           headers={**cookie(gateway), "Origin": EVIL})  # fmt: skip
        assert resp.status == 200
        assert "Access-Control-Allow-Origin" not in resp.headers


@pytest.mark.parametrize(
    "content_type",
    ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x",
     "application/octet-stream", "text/json", ""],
)  # fmt: skip
async def test_publish_refuses_a_body_not_sent_as_json_with_415(
    gateway: ServedGateway, store: redis.Redis, content_type: str
) -> None:
    status, body = await publish(gateway, gateway.headers(), content_type=content_type)
    assert (status, body["code"]) == (415, "unsupported_media_type"), body
    assert "application/json" in body["message"]
    assert log_length(store) == 0


@pytest.mark.parametrize(
    "content_type",
    ["application/json; charset=utf-8", "Application/JSON", "application/vnd.chirp+json"],
)
async def test_publish_takes_json_with_parameters_and_json_suffixes(
    gateway: ServedGateway, store: redis.Redis, content_type: str
) -> None:
    status, body = await publish(gateway, gateway.headers(), content_type=content_type)
    assert status == 202, body


async def test_the_dev_token_endpoint_refuses_a_body_not_sent_as_json_with_415(
    gateway: ServedGateway,
) -> None:
    """Otherwise a page of any origin could sign the browser in as a user of its choosing."""
    async with aiohttp.ClientSession() as s:
        resp = await s.post(gateway.url + "/v1/dev/token", data=b'{"user": "mallory"}',
                            headers={"Content-Type": "text/plain", "Origin": EVIL})  # fmt: skip
        body = await resp.json()
        assert (resp.status, body["code"]) == (415, "unsupported_media_type")
        assert "Set-Cookie" not in resp.headers


async def handshake(gw: ServedGateway, headers: dict[str, str]) -> int:
    """The status of the answer to a WebSocket handshake (an accepted socket is closed at
    once)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", gw.settings.port)
    lines = [
        "GET /v1/ws HTTP/1.1", f"Host: 127.0.0.1:{gw.settings.port}", "Upgrade: websocket",
        "Connection: Upgrade", "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
        "Sec-WebSocket-Version: 13", *(f"{k}: {v}" for k, v in headers.items()),
    ]  # fmt: skip
    writer.write(("\r\n".join(lines) + "\r\n\r\n").encode())
    try:
        async with asyncio.timeout(10):
            head = await reader.readuntil(b"\r\n\r\n")
    finally:
        writer.close()
    return int(head.split(b" ", 2)[1])


async def test_a_cookie_websocket_from_another_origin_is_refused_at_the_handshake(
    gateway: ServedGateway,
) -> None:
    for sent in ({"Origin": EVIL}, {"Origin": "null"}, {}):
        assert await handshake(gateway, {**cookie(gateway), **sent}) == 403, sent
    # The same handshake from the gateway's own page opens.
    assert await handshake(gateway, {**cookie(gateway), "Origin": gateway.url}) == 101


async def test_a_cookie_websocket_from_the_gateways_own_page_is_signed_in(
    gateway: ServedGateway,
) -> None:
    async with aiohttp.ClientSession() as s:
        ws = await s.ws_connect(gateway.ws_url, headers={**cookie(gateway), "Origin": gateway.url})
        msg = await ws.receive_json(timeout=10)
        assert (msg["type"], msg["subject"]) == ("authenticated", "alice")
        await ws.close()


async def test_a_websocket_from_another_origin_signs_in_with_a_token_it_sends(
    gateway: ServedGateway,
) -> None:
    """The cookie is refused, not the origin: a page of another origin that holds a token
    signs in with it, by the query parameter or the auth message."""
    token = gateway.token("alice")
    async with aiohttp.ClientSession() as s:
        by_query = await s.ws_connect(gateway.ws_url, params={"access_token": token},
                                      headers={**cookie(gateway, "mallory"), "Origin": EVIL})  # fmt: skip
        by_message = await s.ws_connect(gateway.ws_url, headers={"Origin": EVIL})
        await by_message.send_json({"type": "auth", "token": token})
        for ws in (by_query, by_message):
            msg = await ws.receive_json(timeout=10)
            assert (msg["type"], msg["subject"]) == ("authenticated", "alice")
            await ws.close()
