"""The OpenID Connect provider of the tests (tests/support/oidc.py) on its own, without a
gateway: it names itself as the gateway will read it, and its access tokens verify with PyJWT
against its JWKS for each signing algorithm, across a key rotation."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from typing import Any

import jwt
import pytest

from tests.support.oidc import ALGS, Client, OidcProvider, TokenRefused, generate_key

READER = Client("reader", "reader-secret", claims={"realm_access": {"roles": ["read"]}})
PERSON = Client("person-app", "person-secret", subject="user-42")


@pytest.fixture(scope="module", params=ALGS)
def idp(request: pytest.FixtureRequest) -> Iterator[OidcProvider]:
    """A provider whose one key has the algorithm of the test's parameter."""
    alg: str = request.param
    with OidcProvider([generate_key(alg, f"{alg}-1")], clients=[READER, PERSON]) as provider:
        yield provider


def verify(idp: OidcProvider, token: str, audience: str = "liveviews") -> dict[str, Any]:
    """The claims of ``token`` once its signature, audience, issuer and lifetime check out
    against the keys the provider publishes now, as a resource server checks them."""
    key = jwt.PyJWKClient(idp.jwks_uri, cache_keys=False).get_signing_key_from_jwt(token)
    claims: dict[str, Any] = jwt.decode(
        token,
        key,
        algorithms=list(ALGS),
        audience=audience,
        issuer=idp.issuer,
        options={"require": ["exp", "iat", "iss", "aud", "sub"]},
    )
    return claims


def unverified(token: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The header and claims of ``token``, unchecked."""
    claims: dict[str, Any] = jwt.decode(token, options={"verify_signature": False})
    return jwt.get_unverified_header(token), claims


def test_discovery_names_the_issuer_and_its_keys(idp: OidcProvider) -> None:
    doc = idp.discovery()
    assert doc["issuer"] == idp.issuer == f"http://127.0.0.1:{idp.port}"
    assert doc["jwks_uri"] == idp.jwks_uri
    assert doc["token_endpoint"] == idp.token_endpoint
    assert "client_credentials" in doc["grant_types_supported"]
    published = idp.jwks()["keys"]
    assert [k["kid"] for k in published] == [f"{idp.alg}-1"]
    assert all(k["alg"] == idp.alg and k["use"] == "sig" for k in published)
    assert not any({"d", "p", "q"} & k.keys() for k in published), "private members published"


def test_a_token_has_the_claims_a_resource_server_reads(idp: OidcProvider) -> None:
    header, claims = unverified(idp.token("reader", scope="read publish"))
    assert header == {"alg": idp.alg, "kid": f"{idp.alg}-1", "typ": "at+jwt"}
    assert claims["iss"] == idp.issuer
    assert claims["aud"] == "liveviews"
    assert claims["sub"] == claims["client_id"] == "reader"
    assert claims["scope"] == "read publish"
    assert claims["exp"] - claims["iat"] == 3600
    assert abs(claims["iat"] - time.time()) < 60
    assert claims["realm_access"] == {"roles": ["read"]}


def test_clients_subjects_and_scopes(idp: OidcProvider) -> None:
    _, claims = unverified(idp.token("person-app", scope="read service"))
    assert claims["sub"] == "user-42" and claims["client_id"] == "person-app"
    assert claims["scope"] == "read service"
    assert "realm_access" not in claims
    _, claims = unverified(idp.token("reader", scope="read admin"))
    assert claims["scope"] == "read", "a scope the resource server lacks is dropped"
    with pytest.raises(TokenRefused) as refused:
        idp.token("reader", resource="urn:another:api")
    assert refused.value.status == 400 and "invalid_target" in refused.value.body


def test_a_token_verifies_against_the_jwks(idp: OidcProvider) -> None:
    token = idp.token()
    claims = verify(idp, token)
    assert claims["sub"] == "reader" and claims["scope"] == "read publish"
    with pytest.raises(jwt.InvalidAudienceError):
        verify(idp, token, audience="another-service")
    key = jwt.PyJWKClient(idp.jwks_uri).get_signing_key_from_jwt(token)
    with pytest.raises(jwt.InvalidIssuerError):
        jwt.decode(token, key, algorithms=[idp.alg], audience="liveviews", issuer="http://other")
    signed, signature = token.rsplit(".", 1)
    middle = len(signature) // 2
    flipped = "B" if signature[middle] == "A" else "A"
    forged = f"{signed}.{signature[:middle]}{flipped}{signature[middle + 1 :]}"
    with pytest.raises(jwt.InvalidSignatureError):
        verify(idp, forged)


def test_rotation_signs_with_the_new_key_and_old_tokens_still_verify() -> None:
    with OidcProvider([generate_key("ES256", "old")], clients=[READER]) as idp:
        issuer, before = idp.issuer, idp.token()
        idp.rotate(generate_key("ES256", "new"))
        after = idp.token()
        assert idp.issuer == issuer
        assert unverified(before)[0]["kid"] == "old"
        assert unverified(after)[0]["kid"] == "new"
        assert [k["kid"] for k in idp.jwks()["keys"]] == ["new", "old"]
        assert verify(idp, before)["sub"] == verify(idp, after)["sub"] == "reader"

        idp.retire("old")
        assert [k["kid"] for k in idp.jwks()["keys"]] == ["new"]
        assert verify(idp, idp.token())["sub"] == "reader"
        with pytest.raises(jwt.PyJWKClientError):
            verify(idp, before)


def test_a_short_lifetime_expires_and_the_provider_stops_with_the_block() -> None:
    with OidcProvider([generate_key("EdDSA", "k")], access_token_ttl=2) as idp:
        answer = idp.token_response(scope="read")
        assert answer["expires_in"] == 2
        _, claims = unverified(answer["access_token"])
        assert claims["exp"] - claims["iat"] == 2
        pid, port = idp.pid, idp.port
        assert pid is not None
    assert not idp.running
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    time.sleep(max(0.0, claims["exp"] - time.time() + 0.1))
    with pytest.raises(jwt.ExpiredSignatureError):
        jwt.decode(answer["access_token"], options={"verify_signature": False, "verify_exp": True})


def test_a_provider_that_cannot_start_says_why() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        idp = OidcProvider([generate_key("ES256", "k")], port=taken.getsockname()[1])
        with pytest.raises(AssertionError, match="exited .* before it listened(.|\n)*EADDRINUSE"):
            idp.start()
        assert not idp.running
        idp.close()
