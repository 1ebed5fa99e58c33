"""Tokens from an identity provider: a real OpenID Connect provider (``oidc-provider``, started
by ``tests.support.oidc``) signs them, and a real gateway in production mode, with no secret of
its own, takes them (``liveviews.gateway.keys``, ``liveviews.gateway.auth``).

Its keys are found through the issuer's discovery document, rotated in the middle of a
subscription across RS256, ES256 and EdDSA, and retired; hostile tokens are refused with a
status and a code; a key set that answers garbage, slowly or not at all, and a flood of tokens
naming made-up keys, do not stop the gateway from taking the tokens it can verify.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import time
import uuid
from collections.abc import Iterator
from typing import Any

import aiohttp
import jwt
import orjson
import pytest
import redis
from cryptography.hazmat.primitives import serialization

from bench.tokens import KeySet
from liveviews.errors import ConfigurationError
from liveviews.gateway import keys
from liveviews.gateway.settings import GatewaySettings
from tests.support.gateway import ServedGateway, Writer, open_sse
from tests.support.gateway_settings import settings_for
from tests.support.oidc import Client, OidcProvider, generate_key, public

VIEW = "/v1/views/profiles/alice"
CLIENTS = [
    Client("alice-app", subject="alice"),
    Client("roles-app", subject="bob", claims={"realm_access": {"roles": ["read"]}}),
]


def production(store_url: str, **env: str) -> GatewaySettings:
    return settings_for(store_url, LV_ENV="production", LV_DEV_TOKENS="off", LV_LOG_FEED="off",
                        **env)  # fmt: skip


@pytest.fixture()
def idp() -> Iterator[OidcProvider]:
    with OidcProvider([generate_key("ES256", "es-1")], clients=CLIENTS) as provider:
        yield provider


@pytest.fixture()
def served(idp: OidcProvider, store_url: str) -> Iterator[ServedGateway]:
    gateway = ServedGateway(production(store_url, LV_JWT_ISSUER=idp.issuer)).start()
    yield gateway
    gateway.stop()


@pytest.fixture()
def quick_refetch(monkeypatch: pytest.MonkeyPatch) -> None:
    """A key set fetched again 0.2 s after the last fetch, so that a test's rotations need not
    wait the gateway's 5 s."""
    monkeypatch.setattr(keys, "MIN_FETCH_INTERVAL_S", 0.2)


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def status_of(url: str, token: str) -> tuple[int, dict[str, Any]]:
    async with aiohttp.ClientSession() as s, s.get(url, headers=bearer(token)) as resp:
        return resp.status, await resp.json()


def signed(key: dict[str, Any], **claims: Any) -> str:
    """A token signed by ``key`` (a private JWK) with ``claims`` over sensible defaults."""
    base = {"sub": "alice", "scope": "read", "aud": "liveviews", "iat": int(time.time()),
            "exp": int(time.time()) + 300}  # fmt: skip
    return jwt.encode({**base, **claims}, jwt.PyJWK(key).key, algorithm=key["alg"],
                      headers={"kid": key["kid"]})  # fmt: skip


def hs256_with_public_key(key: dict[str, Any], issuer: str) -> str:
    """The algorithm-confusion attack: HS256 whose secret is the provider's public key, which
    anyone can fetch."""
    pem = jwt.PyJWK(public(key)).key.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )

    def b64(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    head = b64(orjson.dumps({"alg": "HS256", "typ": "JWT", "kid": key["kid"]}))
    body = b64(orjson.dumps({"sub": "alice", "scope": "read publish", "aud": "liveviews",
                             "iss": issuer, "exp": int(time.time()) + 300}))  # fmt: skip
    mac = hmac.new(pem, f"{head}.{body}".encode(), hashlib.sha256).digest()
    return f"{head}.{body}.{b64(mac)}"


async def test_provider_tokens_are_taken_through_rotations_mid_subscription(
    idp: OidcProvider, served: ServedGateway, writer: Writer, store: redis.Redis,
    quick_refetch: None,
) -> None:  # fmt: skip
    """An SSE subscription opened with an ES256 token goes on receiving deltas while the
    provider rotates to an RS256 and then an EdDSA key; a token of each signs in, and those of
    the keys before still do while the provider publishes them."""
    first = idp.token("alice-app", scope="read publish")
    async with aiohttp.ClientSession() as s:
        sse = await open_sse(s, served.url + VIEW + "/live", bearer(first))
        assert (await sse.next()).event == "snapshot"
        tokens = [first]
        for n, alg in enumerate(("RS256", "EdDSA"), 2):
            idp.rotate(generate_key(alg, f"{alg.lower()}-{n}"))
            token = idp.token("alice-app", scope="read publish")
            assert jwt.get_unverified_header(token)["alg"] == alg
            tokens.append(token)
            for each in tokens:
                status, body = await status_of(served.url + VIEW, each)
                assert status == 200, body
            async with s.post(served.url + "/v1/events", headers=bearer(token), json=[
                {"type": "profile_set", "payload": {"user": "alice", "name": f"A{n}"}}
            ]) as posted:  # fmt: skip
                assert posted.status == 202, await posted.text()
            writer.write([("profiles", "alice", "profile", {"name": f"A{n}"})])
            delta = await sse.next(skip=("progress",))
            assert delta.event == "delta" and delta.data["ops"][0]["value"] == {"name": f"A{n}"}
        await sse.close()
        async with s.ws_connect(served.ws_url) as ws:
            await ws.send_json({"type": "auth", "token": tokens[-1]})
            signed_in = await ws.receive_json(timeout=5)
            assert signed_in["type"] == "authenticated" and signed_in["subject"] == "alice"


async def test_a_key_the_provider_no_longer_publishes_is_refused(
    idp: OidcProvider, served: ServedGateway, quick_refetch: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    old = idp.token("alice-app")
    assert (await status_of(served.url + VIEW, old))[0] == 200
    idp.rotate(generate_key("ES256", "es-2"))
    idp.retire("es-1")
    monkeypatch.setattr(keys, "MAX_AGE_S", 0.0)  # the held keys are read again at once
    status, body = await status_of(served.url + VIEW, old)
    assert (status, body["code"]) == (401, "token_invalid") and "'es-1'" in body["message"]
    assert (await status_of(served.url + VIEW, idp.token("alice-app")))[0] == 200


async def test_hostile_tokens_are_refused_with_a_status_and_a_code(
    idp: OidcProvider, served: ServedGateway
) -> None:
    key = idp.keys[0]
    now = int(time.time())
    outsider = generate_key("ES256", "es-1")  # the same kid, another key: a forged signature

    def b64(d: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(orjson.dumps(d)).rstrip(b"=").decode()

    alg_none = f"{b64({'alg': 'none', 'kid': 'es-1'})}.{b64({'sub': 'alice', 'iss': idp.issuer, 'aud': 'liveviews', 'exp': now + 60})}."  # noqa: E501
    cases = {
        "alg none": (alg_none, 401, "token_invalid", "signed with 'none'"),
        "HS256 with the public key": (hs256_with_public_key(key, idp.issuer), 401,
                                      "token_invalid", "signed with 'HS256'"),
        "another issuer": (signed(key, iss="https://evil.example"), 401, "token_invalid",
                           f"its 'iss' must be {idp.issuer!r}"),
        "no issuer": (signed(key), 401, "token_invalid", "lacks the 'iss' claim"),
        "another audience": (signed(key, iss=idp.issuer, aud="other"), 401, "token_invalid",
                             "'aud' must be 'liveviews'"),
        "expired beyond the leeway": (signed(key, iss=idp.issuer, exp=now - 120), 401,
                                      "token_expired", "expired"),
        "forged signature": (signed(outsider, iss=idp.issuer), 401, "token_invalid",
                             "signature is wrong"),
        "unknown key": (signed(generate_key("ES256", "nobody"), iss=idp.issuer), 401,
                        "token_invalid", "'nobody'"),
        "no subject": (signed(key, iss=idp.issuer, sub=""), 401, "token_invalid",
                       "'sub' claim, its subject"),
        "no read scope": (signed(key, iss=idp.issuer, scope="publish"), 403,
                          "insufficient_scope", "'read'"),
    }  # fmt: skip
    for name, (token, status, code, said) in cases.items():
        got, body = await status_of(served.url + VIEW, token)
        assert (got, body["code"]) == (status, code), (name, body)
        assert said in body["message"], (name, body["message"])
    assert (await status_of(served.url + VIEW, signed(key, iss=idp.issuer, exp=now - 5)))[0] == 200


async def test_the_scope_claim_can_be_a_path_to_a_list_of_roles(
    idp: OidcProvider, store_url: str
) -> None:
    settings = production(store_url, LV_JWT_ISSUER=idp.issuer,
                          LV_JWT_SCOPE_CLAIM="realm_access.roles")  # fmt: skip
    gateway = ServedGateway(settings).start()
    try:
        token = idp.token("roles-app", scope="read publish")
        assert (await status_of(gateway.url + VIEW, token))[0] == 200
        async with aiohttp.ClientSession() as s, s.post(
            gateway.url + "/v1/events", headers=bearer(token),
            json=[{"type": "profile_set", "payload": {"user": "bob", "name": "B"}}],
        ) as resp:  # fmt: skip
            body = await resp.json()
        assert (resp.status, body["code"]) == (403, "insufficient_scope")
    finally:
        gateway.stop()


async def test_a_key_set_that_answers_garbage_or_slowly_keeps_the_keys_held(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    issuer = "https://idp.example"
    held, rotated = generate_key("RS256", "rs-1"), generate_key("EdDSA", "ed-2")
    monkeypatch.setattr(keys, "MIN_FETCH_INTERVAL_S", 0.2)
    monkeypatch.setattr(keys, "FETCH_TIMEOUT_S", 0.5)
    with KeySet({"keys": [public(held)]}) as jwks:
        settings = production(store_url, LV_JWT_ISSUER=issuer, LV_JWKS_URL=jwks.url)
        gateway = ServedGateway(settings).start()
        try:
            assert (await status_of(gateway.url + VIEW, signed(held, iss=issuer)))[0] == 200
            for mode in ("garbage", "slow"):
                jwks.mode = mode
                time.sleep(0.3)
                status, body = await status_of(gateway.url + VIEW, signed(rotated, iss=issuer))
                assert (status, body["code"]) == (401, "token_invalid"), (mode, body)
                began = time.monotonic()
                assert (await status_of(gateway.url + VIEW, signed(held, iss=issuer)))[0] == 200
                assert time.monotonic() - began < 0.4, mode  # no wait behind the slow fetch
            jwks.mode, jwks.document = "keys", {"keys": [public(rotated), public(held)]}
            time.sleep(0.3)
            assert (await status_of(gateway.url + VIEW, signed(rotated, iss=issuer)))[0] == 200
        finally:
            gateway.stop()


async def test_a_flood_of_made_up_keys_fetches_the_key_set_once_per_interval(
    store_url: str,
) -> None:
    issuer = "https://idp.example"
    held = generate_key("ES256", "es-1")
    with KeySet({"keys": [public(held)]}) as jwks:
        gateway = ServedGateway(production(store_url, LV_JWT_ISSUER=issuer,
                                           LV_JWKS_URL=jwks.url)).start()  # fmt: skip
        try:
            assert (await status_of(gateway.url + VIEW, signed(held, iss=issuer)))[0] == 200
            for _ in range(40):
                made_up = generate_key("ES256", uuid.uuid4().hex)
                status, _ = await status_of(gateway.url + VIEW, signed(made_up, iss=issuer))
                assert status == 401
            assert jwks.fetches <= 2, jwks.fetches  # the first token's, and one 5 s later
        finally:
            gateway.stop()


async def test_keys_that_cannot_be_read_at_all_answer_503(store_url: str) -> None:
    from liveviews.store.embedded import free_port

    issuer = "https://idp.example"
    settings = production(store_url, LV_JWT_ISSUER=issuer,
                          LV_JWKS_URL=f"http://127.0.0.1:{free_port()}/jwks")  # fmt: skip
    gateway = ServedGateway(settings).start()
    try:
        token = signed(generate_key("RS256", "rs-1"), iss=issuer)
        status, body = await status_of(gateway.url + VIEW, token)
        assert (status, body["code"]) == (503, "keys_unavailable")
        assert "try again" in body["message"]
    finally:
        gateway.stop()


def test_production_takes_a_provider_instead_of_a_secret(store_url: str) -> None:
    settings = production(store_url, LV_JWT_ISSUER="https://idp.example")
    assert settings.jwt_secret is None and settings.provider
    with pytest.raises(ConfigurationError, match="LV_JWT_SECRET or an identity provider"):
        production(store_url)
    with pytest.raises(ConfigurationError, match="LV_JWKS_URL is set without LV_JWT_ISSUER"):
        production(store_url, LV_JWKS_URL="https://idp.example/jwks")
    with pytest.raises(ConfigurationError, match="HS256 is taken only with LV_JWT_SECRET"):
        production(store_url, LV_JWT_ISSUER="https://idp.example", LV_JWT_ALGORITHMS="HS256")
    dev = settings_for(store_url, LV_JWT_ISSUER="https://idp.example")
    assert dev.jwt_secret is not None and dev.provider  # dev tokens beside the provider's


async def test_a_service_identity_reads_any_key_and_publishes_as_the_authors_named(
    store_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A backend's token with the ``service`` scope reads a key its subject may not read and
    publishes as another author, each use logged; the same subject without it may not, and a
    service token is not taken from the cookie."""
    backend = Client("notifier", subject="notifier")
    with OidcProvider([generate_key("EdDSA", "ed-1")], clients=[backend]) as idp:
        gateway = ServedGateway(production(store_url, LV_JWT_ISSUER=idp.issuer)).start()
        try:
            service = idp.token("notifier", scope="read publish service")
            plain = idp.token("notifier", scope="read publish")
            timeline = gateway.url + "/v1/views/timeline/alice"  # readable by alice only
            assert (await status_of(timeline, plain))[0] == 403
            with caplog.at_level(logging.INFO, logger="liveviews.gateway"):
                assert (await status_of(timeline, service))[0] == 200
            assert "service 'notifier' reads timeline/alice" in caplog.text
            rename = [{"type": "profile_set", "payload": {"user": "alice", "name": "by service"}}]
            async with aiohttp.ClientSession() as s:
                async with s.post(gateway.url + "/v1/events", headers=bearer(plain),
                                  json=rename) as refused:  # fmt: skip
                    assert (refused.status, (await refused.json())["code"]) == (403, "not_author")
                with caplog.at_level(logging.INFO, logger="liveviews.gateway"):
                    async with s.post(gateway.url + "/v1/events", headers=bearer(service),
                                      json=rename) as taken:  # fmt: skip
                        assert taken.status == 202, await taken.text()
                assert "service 'notifier' publishes 1 events as alice" in caplog.text
            async with aiohttp.ClientSession(cookies={"lv_token": service}) as s:
                async with s.get(timeline) as by_cookie:
                    body = await by_cookie.json()
                assert (by_cookie.status, body["code"]) == (403, "service_by_cookie")
        finally:
            gateway.stop()
