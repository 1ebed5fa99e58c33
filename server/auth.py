"""Who a request is from: signed bearer tokens (JWT, HS256) and what they allow.

A token carries ``sub`` (the subject, e.g. a Chirp user name), ``scope`` (space-separated
rights: ``read`` to read and subscribe, ``publish`` to append events), ``aud`` (this gateway's
audience) and ``exp``. Only HS256 is accepted, so ``alg: none`` and algorithm confusion fail
like a forged signature. Browsers' EventSource cannot set headers, so a token is also taken
from the ``access_token`` query parameter or the ``lv_token`` cookie.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import jwt
from starlette.requests import HTTPConnection

from server.errors import Forbidden, Unauthorized

ALGORITHM = "HS256"
COOKIE = "lv_token"
QUERY_PARAM = "access_token"
READ = "read"
PUBLISH = "publish"
ALL_SCOPES = (READ, PUBLISH)


@dataclass(frozen=True)
class Principal:
    """The verified subject of a token, its rights and when they end (Unix seconds)."""

    subject: str
    scopes: frozenset[str]
    expires_at: float

    def require(self, scope: str) -> None:
        if scope not in self.scopes:
            raise Forbidden(
                f"this token does not grant {scope!r}; ask for a token whose scope includes it.",
                code="insufficient_scope",
            )

    @property
    def expired(self) -> bool:
        return time.time() >= self.expires_at


class Authenticator:
    """Verifies and (for the dev token endpoint) issues tokens with one secret."""

    def __init__(self, secret: str, audience: str) -> None:
        self.secret = secret
        self.audience = audience

    def verify(self, token: str) -> Principal:
        try:
            claims = jwt.decode(
                token,
                self.secret,
                algorithms=[ALGORITHM],
                audience=self.audience,
                options={"require": ["sub", "exp", "aud"]},
            )
        except jwt.ExpiredSignatureError:
            raise Unauthorized(
                "the token has expired; sign in again for a new one.", code="token_expired"
            ) from None
        except jwt.InvalidAudienceError:
            raise Unauthorized(
                f"the token is not meant for this gateway; its 'aud' must be {self.audience!r}.",
                code="token_invalid",
            ) from None
        except jwt.MissingRequiredClaimError as exc:
            raise Unauthorized(
                f"the token lacks the {exc.claim!r} claim; tokens need sub, aud and exp.",
                code="token_invalid",
            ) from None
        except jwt.InvalidTokenError:
            raise Unauthorized(
                "the token is malformed, not signed with HS256, or its signature is wrong.",
                code="token_invalid",
            ) from None
        subject, scope = claims.get("sub"), claims.get("scope", "")
        if not isinstance(subject, str) or not subject or not isinstance(scope, str):
            raise Unauthorized(
                "the token's 'sub' must be a non-empty string and 'scope' a string.",
                code="token_invalid",
            )
        return Principal(subject, frozenset(scope.split()), float(claims["exp"]))

    def issue(self, subject: str, scopes: tuple[str, ...], ttl: float) -> tuple[str, float]:
        expires_at = int(time.time() + ttl)
        claims: dict[str, Any] = {
            "sub": subject,
            "scope": " ".join(scopes),
            "aud": self.audience,
            "iat": int(time.time()),
            "exp": expires_at,
        }
        return jwt.encode(claims, self.secret, algorithm=ALGORITHM), float(expires_at)


def token_from(conn: HTTPConnection) -> str | None:
    """The Authorization header wins over the query parameter, which wins over the cookie."""
    header = conn.headers.get("authorization")
    if header is not None:
        scheme, _, value = header.partition(" ")
        if scheme.lower() != "bearer" or not value.strip():
            raise Unauthorized(
                "the Authorization header must be 'Bearer <token>'.", code="token_invalid"
            )
        return value.strip()
    return conn.query_params.get(QUERY_PARAM) or conn.cookies.get(COOKIE) or None


def authenticate(conn: HTTPConnection, auth: Authenticator, scope: str) -> Principal:
    token = token_from(conn)
    if token is None:
        raise Unauthorized(
            "sign in: send a token in the Authorization header, the access_token query "
            "parameter or the lv_token cookie.",
            code="token_missing",
        )
    principal = auth.verify(token)
    principal.require(scope)
    return principal
