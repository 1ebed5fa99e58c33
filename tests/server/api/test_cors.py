"""Cross-origin requests to a gateway with ``LV_CORS_ORIGINS``: refused in the gateway's error
shape, and no allow-origin for an origin not listed."""

from __future__ import annotations

from typing import Any

import aiohttp
import orjson
import pytest
import redis

from tests.support.gateway import ServedGateway

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
