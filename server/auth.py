"""Who a request is from: signed bearer tokens (JWT) and what they allow.

A token carries ``sub`` (the subject, e.g. a Chirp user name), ``scope`` (space-separated
rights: ``read`` to read and subscribe, ``publish`` to append events), ``aud`` (this gateway's
audience) and ``exp``. Two kinds of signature are taken, each only with its own keys:

- HS256 with the gateway's secret (``LV_JWT_SECRET``, or the public dev secret in dev mode);
- RS256, ES256 or EdDSA (``LV_JWT_ALGORITHMS``) with an identity provider's keys
  (``liveviews.gateway.keys``), when ``LV_JWT_ISSUER`` or ``LV_JWKS_URL`` names one; its
  tokens must also carry the issuer as ``iss``. Which claims hold the subject and the scopes
  are settings (``LV_JWT_SUBJECT_CLAIM``, ``LV_JWT_SCOPE_CLAIM``), for providers that put
  roles elsewhere.

So ``alg: none``, an HS256 token signed with a provider's public key and any other algorithm
confusion fail like a forged signature. Browsers' EventSource cannot set headers, so a token
is also taken from the ``access_token`` query parameter or the ``lv_token`` cookie.

The cookie is the one credential a browser sends on its own, whichever page asks it to, so it
is not taken as a cross-site one: a request that changes state with it (any method but GET,
HEAD and OPTIONS, and a WebSocket handshake) must come from this gateway's own origin or from
one listed in ``LV_CORS_ORIGINS`` (``check_origin``).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import jwt
from starlette.requests import HTTPConnection

from liveviews.gateway.errors import Forbidden, Unauthorized
from liveviews.gateway.keys import ProviderKeys

ALGORITHM = "HS256"
COOKIE = "lv_token"
QUERY_PARAM = "access_token"
READ = "read"
PUBLISH = "publish"
SERVICE = "service"
"""A backend's right: read any key of a view whatever its read rule, and publish events as the
author they name. Never taken from the cookie, which a browser sends on its own."""
ALL_SCOPES = (READ, PUBLISH)
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
ORIGIN_REFUSED = "origin_refused"
_DEFAULT_PORTS = {"http": "80", "https": "443"}


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

    @property
    def service(self) -> bool:
        """Is this a backend's service identity (the ``service`` scope)?"""
        return SERVICE in self.scopes


@dataclass(frozen=True)
class Claims:
    """Where a token holds its subject and its scopes: a claim name, or a dotted path into
    nested claims (``realm_access.roles``). Scopes are a space-separated string or a list."""

    subject: str = "sub"
    scope: str = "scope"


class Authenticator:
    """Verifies and (for the dev token endpoint) issues tokens; ``secret`` signs HS256 tokens
    (None: none are taken), ``provider`` holds an identity provider's keys (None: no provider);
    ``origins`` are the other origins whose pages may act with the ``lv_token`` cookie."""

    def __init__(
        self,
        secret: str | None,
        audience: str,
        origins: Iterable[str] = (),
        *,
        provider: ProviderKeys | None = None,
        claims: Claims = Claims(),
        leeway: float = 0.0,
    ) -> None:
        self.secret = secret
        self.audience = audience
        self.origins = frozenset(o for o in map(_origin, origins) if o is not None)
        self.provider = provider
        self.claims = claims
        self.leeway = leeway

    async def verify(self, token: str) -> Principal:
        """The principal of ``token``; a provider's keys are fetched first when the token
        names one the gateway does not hold yet."""
        try:
            header = jwt.get_unverified_header(token)
        except jwt.InvalidTokenError:
            raise Unauthorized("the token is malformed.", code="token_invalid") from None
        alg = header.get("alg")
        if alg == ALGORITHM and self.secret is not None:
            return self._verified(
                token, self.secret, ALGORITHM, None, Claims(), leeway=0.0, check_iat=False
            )
        provider = self.provider
        if provider is not None and isinstance(alg, str) and alg in provider.algorithms:
            kid = header.get("kid")
            key = await provider.key(kid if isinstance(kid, str) else None, alg)
            return self._verified(token, key, alg, provider.issuer, self.claims, self.leeway)
        accepted = [*([ALGORITHM] if self.secret is not None else []),
                    *(provider.algorithms if provider is not None else ())]  # fmt: skip
        raise Unauthorized(
            f"the token is signed with {str(alg)[:20]!r}; this gateway takes tokens signed "
            f"with {' or '.join(accepted)}.",
            code="token_invalid",
        )

    def _verified(
        self, token: str, key: Any, alg: str, issuer: str | None, where: Claims, leeway: float,
        check_iat: bool = True,
    ) -> Principal:  # fmt: skip
        """``token``'s principal, its signature checked with ``key``; ``leeway`` is the clock
        skew allowed, for a provider's clock only (the gateway's own tokens share its clock);
        ``check_iat``: refuse a token issued after this clock's now, beyond the leeway."""
        try:
            claims = jwt.decode(
                token,
                key,
                algorithms=[alg],
                audience=self.audience,
                issuer=issuer,
                leeway=leeway,
                options={
                    "require": [
                        "exp",
                        "aud",
                        *(["sub"] if where.subject == "sub" else []),
                        *(["iss"] if issuer else []),
                    ],
                    # An HS256 token's iat is its signer's clock (a backend's, or this gateway's
                    # before its clock was set back): with no leeway a second of skew would
                    # refuse fresh tokens, and exp alone bounds what a token may do.
                    "verify_iat": check_iat,
                },  # fmt: skip
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
        except jwt.ImmatureSignatureError:
            raise Unauthorized(
                "the token is not valid yet by this gateway's clock (its 'nbf' or 'iat' is "
                "ahead of it); check the clocks of the gateway and of the token's issuer.",
                code="token_invalid",
            ) from None
        except jwt.InvalidIssuerError:
            raise Unauthorized(
                f"the token was not issued by this gateway's identity provider; its 'iss' must "
                f"be {issuer!r}.",
                code="token_invalid",
            ) from None
        except jwt.InvalidTokenError:
            raise Unauthorized(
                f"the token is malformed, not signed with {alg}, or its signature is wrong.",
                code="token_invalid",
            ) from None
        subject, scope = _claim(claims, where.subject), _claim(claims, where.scope)
        if not isinstance(subject, str) or not subject:
            raise Unauthorized(
                f"the token's {where.subject!r} claim, its subject, must be a non-empty string.",
                code="token_invalid",
            )
        if scope is None:
            scopes: frozenset[str] = frozenset()
        elif isinstance(scope, str):
            scopes = frozenset(scope.split())
        elif isinstance(scope, list) and all(isinstance(s, str) for s in scope):
            scopes = frozenset(scope)
        else:
            raise Unauthorized(
                f"the token's {where.scope!r} claim, its scopes, must be a string of "
                "space-separated scopes or a list of strings.",
                code="token_invalid",
            )
        return Principal(subject, scopes, float(claims["exp"]))

    def issue(self, subject: str, scopes: tuple[str, ...], ttl: float) -> tuple[str, float]:
        if self.secret is None:
            raise RuntimeError("this gateway has no secret to sign tokens with")
        expires_at = int(time.time() + ttl)
        claims: dict[str, Any] = {
            "sub": subject,
            "scope": " ".join(scopes),
            "aud": self.audience,
            "iat": int(time.time()),
            "exp": expires_at,
        }
        return jwt.encode(claims, self.secret, algorithm=ALGORITHM), float(expires_at)


def _claim(claims: dict[str, Any], path: str) -> Any:
    """The claim at a dotted ``path`` (``realm_access.roles``), or None where it is missing."""
    found: Any = claims
    for part in path.split("."):
        found = found.get(part) if isinstance(found, dict) else None
    return found


def token_from(conn: HTTPConnection) -> str | None:
    """The Authorization header wins over the query parameter, which wins over the cookie.

    A header or parameter given twice is refused: which of the two tokens to take is anyone's
    guess, and a first one that is wrong would pass unnoticed.
    """
    headers = conn.headers.getlist("authorization")
    if len(headers) > 1:
        raise Unauthorized(
            f"send one Authorization header, not {len(headers)}.", code="token_invalid"
        )
    if headers:
        scheme, _, value = headers[0].partition(" ")
        if scheme.lower() != "bearer" or not value.strip():
            raise Unauthorized(
                "the Authorization header must be 'Bearer <token>'.", code="token_invalid"
            )
        return value.strip()
    tokens = conn.query_params.getlist(QUERY_PARAM)
    if len(tokens) > 1:
        raise Unauthorized(
            f"send the {QUERY_PARAM} query parameter once, not {len(tokens)} times.",
            code="token_invalid",
        )
    return (tokens[0] if tokens else None) or conn.cookies.get(COOKIE) or None


def by_cookie(conn: HTTPConnection) -> bool:
    """Is the token ``token_from`` takes the cookie's?"""
    return (
        "authorization" not in conn.headers
        and not conn.query_params.get(QUERY_PARAM)
        and bool(conn.cookies.get(COOKIE))
    )


async def authenticate(conn: HTTPConnection, auth: Authenticator, scope: str) -> Principal:
    token = token_from(conn)
    if token is None:
        raise Unauthorized(
            "sign in: send a token in the Authorization header, the access_token query "
            "parameter or the lv_token cookie.",
            code="token_missing",
        )
    if conn.scope.get("method") not in SAFE_METHODS and by_cookie(conn):
        check_origin(conn, auth.origins)
    principal = await auth.verify(token)
    refuse_service_by_cookie(conn, principal)
    principal.require(scope)
    return principal


def refuse_service_by_cookie(conn: HTTPConnection, principal: Principal) -> None:
    """A service token is a backend's: never taken from the cookie a browser sends on its own."""
    if not principal.service or not by_cookie(conn):
        return
    raise Forbidden(
        "a token with the 'service' scope is a backend's and is not taken from the lv_token "
        "cookie, which a browser sends on its own: send it in the Authorization header.",
        code="service_by_cookie",
    )


def check_origin(conn: HTTPConnection, allowed: frozenset[str]) -> None:
    """Refuses (403 ``origin_refused``) a request that is not from a page of this gateway's own
    origin nor of one of ``allowed``; called for the state changes the cookie authenticates.

    A browser sends ``Origin`` with every POST and WebSocket handshake; when it is missing the
    ``Referer``'s origin stands in, and a request that names neither is refused. The page's
    host and port must be the request's ``Host``; its scheme is not compared, as a proxy that
    ends TLS may not pass it on. ``Sec-Fetch-Site: same-origin``, which browsers set and pages
    cannot, also admits a request, for a proxy that rewrites ``Host``.
    """
    if conn.headers.get("sec-fetch-site") == "same-origin":
        return
    raw = conn.headers.get("origin") or conn.headers.get("referer")
    origin = _origin(raw) if raw else None
    if origin is not None and (origin in allowed or origin == _own_origin(conn, origin)):
        return
    if raw is None:
        refused = "but names no page it comes from (no Origin or Referer header)"
    else:
        refused = (
            f"from a page at {raw[:100]!r}, which is neither this gateway's origin nor one "
            "listed in LV_CORS_ORIGINS"
        )
    raise Forbidden(
        f"this request would change state with the lv_token cookie {refused}: send the token "
        "itself (Authorization header, access_token parameter or WebSocket auth message), or "
        "send the request from a page of an allowed origin.",
        code=ORIGIN_REFUSED,
    )


def _origin(url: str) -> str | None:
    """``scheme://host[:port]`` of ``url``, lowercased and without a default port; None for
    an opaque origin (``null``) or anything that is not an absolute http(s) URL."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not parts.hostname:
        return None
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    if port is not None and str(port) != _DEFAULT_PORTS[scheme]:
        host = f"{host}:{port}"
    return f"{scheme}://{host}"


def _own_origin(conn: HTTPConnection, page: str) -> str | None:
    """The origin of the request's own ``Host`` in the page origin's scheme, which a proxy
    that ends TLS may not have passed on."""
    scheme = page.partition("://")[0]
    host = conn.headers.get("host", "").strip()
    if not host or any(c in host for c in "/\\@?#"):
        return None
    return _origin(f"{scheme}://{host}")
