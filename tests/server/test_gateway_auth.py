"""Every way a request can be refused for who it is from, and the EventSource ways of signing in."""

from __future__ import annotations

import base64
import time
from typing import Any

import aiohttp
import jwt
import orjson
import pytest
import redis

from tests.support.gateway import ServedGateway, Writer, open_sse

VIEW = "/v1/views/profiles/alice"


def forged(gw: ServedGateway) -> str:
    return jwt.encode({"sub": "alice", "scope": "read", "aud": gw.settings.jwt_audience,
                       "exp": int(time.time()) + 60}, "another-secret-of-the-right-length-x",
                      algorithm="HS256")  # fmt: skip


def alg_none(gw: ServedGateway) -> str:
    def b64(d: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(orjson.dumps(d)).rstrip(b"=").decode()

    claims = {"sub": "alice", "scope": "read", "aud": gw.settings.jwt_audience,
              "exp": int(time.time()) + 60}  # fmt: skip
    return f"{b64({'alg': 'none', 'typ': 'JWT'})}.{b64(claims)}."


def denials(gw: ServedGateway) -> list[tuple[str, dict[str, str], int, str]]:
    bearer = "Bearer {}".format
    return [
        ("no token", {}, 401, "token_missing"),
        ("not bearer", {"Authorization": "Basic abc"}, 401, "token_invalid"),
        ("malformed", {"Authorization": bearer("not.a.jwt")}, 401, "token_invalid"),
        ("forged", {"Authorization": bearer(forged(gw))}, 401, "token_invalid"),
        ("alg none", {"Authorization": bearer(alg_none(gw))}, 401, "token_invalid"),
        ("expired", {"Authorization": bearer(gw.token("alice", ttl=-10))}, 401, "token_expired"),
        ("wrong audience", {"Authorization": bearer(gw.token("alice", aud="other"))}, 401,
         "token_invalid"),
        ("no subject", {"Authorization": bearer(jwt.encode(
            {"aud": gw.settings.jwt_audience, "exp": int(time.time()) + 60},
            gw.settings.jwt_secret, algorithm="HS256"))}, 401, "token_invalid"),
        ("no read scope", {"Authorization": bearer(gw.token("alice", scope="publish"))}, 403,
         "insufficient_scope"),
    ]  # fmt: skip


def signed(gw: ServedGateway, **claims: Any) -> str:
    body = {"sub": "alice", "scope": "read", "aud": gw.settings.jwt_audience,
            "exp": int(time.time()) + 60, **claims}  # fmt: skip
    return jwt.encode(body, gw.settings.jwt_secret, algorithm="HS256")


async def test_a_token_issued_by_a_clock_ahead_is_taken_and_one_not_valid_yet_says_why(
    gateway: ServedGateway,
) -> None:
    # The signer's clock (a backend's, or this gateway's before it was set back) may be ahead:
    # a gateway-signed token's 'iat' is not checked, its 'exp' bounds it. An explicit 'nbf' is.
    ahead = signed(gateway, iat=int(time.time()) + 600)
    later = signed(gateway, nbf=int(time.time()) + 600)
    async with aiohttp.ClientSession() as s:
        taken = await s.get(gateway.url + VIEW, headers={"Authorization": f"Bearer {ahead}"})
        assert taken.status == 200
        refused = await s.get(gateway.url + VIEW, headers={"Authorization": f"Bearer {later}"})
        body = await refused.json()
        assert (refused.status, body["code"]) == (401, "token_invalid")
        assert "clock" in body["message"]


@pytest.mark.parametrize("path", [VIEW, VIEW + "/live"])
async def test_every_denial_answers_its_status_and_code(gateway: ServedGateway, path: str) -> None:
    async with aiohttp.ClientSession() as s:
        for name, headers, status, code in denials(gateway):
            resp = await s.get(gateway.url + path, headers=headers)
            body = await resp.json()
            assert (resp.status, body["code"]) == (status, code), name
            assert body["message"]
            if status == 401:
                assert resp.headers["WWW-Authenticate"] == "Bearer"


async def test_read_rules_of_the_view_apply(gateway: ServedGateway, store: redis.Redis) -> None:
    async with aiohttp.ClientSession() as s:
        mine = await s.get(gateway.url + "/v1/views/timeline/alice", headers=gateway.headers())
        assert mine.status == 200
        other = await s.get(gateway.url + "/v1/views/timeline/bob", headers=gateway.headers())
        assert (other.status, (await other.json())["code"]) == (403, "forbidden")


async def test_eventsource_can_sign_in_by_query_parameter_or_cookie(
    gateway: ServedGateway, store: redis.Redis
) -> None:
    token = gateway.token("alice", scope="read")
    async with aiohttp.ClientSession() as s:
        sse = await open_sse(s, gateway.url + VIEW + "/live", params={"access_token": token})
        assert (await sse.next()).event == "snapshot"
        await sse.close()
    async with aiohttp.ClientSession(cookies={"lv_token": token}) as s:
        sse = await open_sse(s, gateway.url + VIEW + "/live")
        assert (await sse.next()).event == "snapshot"
        await sse.close()
        # A header, when sent, wins over the cookie: here a bad one.
        resp = await s.get(gateway.url + VIEW, headers={"Authorization": "Bearer x"})
        assert resp.status == 401


async def test_the_dev_token_endpoint_signs_in_a_user_with_a_cookie(
    gateway: ServedGateway, tight_gateway: ServedGateway, store: redis.Redis
) -> None:
    # unsafe: keep cookies of an IP-address host, as a browser does for 127.0.0.1
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as s:
        resp = await s.post(gateway.url + "/v1/dev/token", json={"user": "alice"})
        body = await resp.json()
        assert resp.status == 200 and body["subject"] == "alice"
        assert body["scope"] == "read publish"
        # The cookie it set is enough for EventSource.
        sse = await open_sse(s, gateway.url + VIEW + "/live")
        assert (await sse.next()).event == "snapshot"
        await sse.close()
        bad = await s.post(gateway.url + "/v1/dev/token", json={"user": "no spaces"})
        assert (bad.status, (await bad.json())["code"]) == (400, "invalid_user")
        # Off in production mode, where it does not exist at all.
        off = await s.post(tight_gateway.url + "/v1/dev/token", json={"user": "alice"})
        assert (off.status, (await off.json())["code"]) == (404, "not_found")


async def test_an_expiring_token_ends_the_stream_with_a_reason_and_a_resumable_id(
    gateway: ServedGateway, store: redis.Redis, writer: Writer
) -> None:
    async with aiohttp.ClientSession() as s:
        token = gateway.token("alice", ttl=3)  # a whole second: it expires in 2 to 3 s
        sse = await open_sse(s, gateway.url + VIEW + "/live",
                             {"Authorization": f"Bearer {token}"})  # fmt: skip
        snap = await sse.next()
        writer.write([("profiles", "alice", "profile", {"name": "A"})])
        delta = await sse.next()
        end = await sse.next(timeout=5, skip=("progress",))
        assert end.event == "end" and end.data["code"] == "token_expired"
        assert end.data["last_event_id"] == delta.id != snap.id
        with pytest.raises(EOFError):
            await sse.next(timeout=5)
