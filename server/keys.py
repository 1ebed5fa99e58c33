"""An identity provider's signing keys: its JWKS, fetched, cached, and fetched again when a
token names a key the cache does not hold (the provider rotated its keys).

The keys come from ``LV_JWKS_URL``, or from the ``jwks_uri`` of the issuer's OpenID Connect
discovery document (``<LV_JWT_ISSUER>/.well-known/openid-configuration``). A fetch happens at
most once per ``MIN_FETCH_INTERVAL_S`` whatever tokens clients send, so a flood of tokens
naming made-up keys costs the provider nothing; a fetch that fails or answers garbage keeps the
keys already held, so tokens signed with them keep being accepted.

Fetches are rare, so they go through the standard library in a thread rather than an HTTP
client the gateway would otherwise not need.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import urllib.request
from typing import Any

import jwt

from liveviews.gateway.errors import Unauthorized, Unavailable

log = logging.getLogger("liveviews.gateway")

MIN_FETCH_INTERVAL_S = 5.0
"""The shortest time between two fetches of the keys."""
MAX_AGE_S = 600.0
"""Keys held this long are fetched again at the next token, so that a key the provider has
withdrawn stops being accepted."""
FETCH_TIMEOUT_S = 5.0
MAX_DOCUMENT_BYTES = 1_048_576
DISCOVERY = "/.well-known/openid-configuration"


class ProviderKeys:
    """The verification keys of one identity provider, by ``kid``."""

    def __init__(self, algorithms: tuple[str, ...], jwks_url: str | None, issuer: str | None):
        if jwks_url is None and issuer is None:
            raise ValueError("an identity provider needs a JWKS URL or an issuer")
        self.algorithms = algorithms
        self.jwks_url = jwks_url
        self.issuer = issuer
        self._keys: dict[str, jwt.PyJWK] = {}
        self._fetched_at = 0.0
        self._tried_at = -MIN_FETCH_INTERVAL_S
        self._failure: str | None = None
        self._lock = asyncio.Lock()

    @property
    def source(self) -> str:
        """Where the keys come from, as a person reads it in an error."""
        return self.jwks_url or f"{(self.issuer or '').rstrip('/')}{DISCOVERY}"

    async def key(self, kid: str | None, alg: str) -> jwt.PyJWK:
        """The key that signed a token whose header names ``kid`` and ``alg``."""
        stale = time.monotonic() - self._fetched_at >= MAX_AGE_S
        if self._find(kid, alg) is None or stale:
            await self._refresh()
        found = self._find(kid, alg)
        if found is not None:
            return found
        if not self._keys and self._failure is not None:
            raise Unavailable(
                f"the gateway cannot read the identity provider's keys at {self.source} "
                f"({self._failure}); try again in a few seconds.",
                code="keys_unavailable",
            )
        named = f"key {kid!r}" if kid is not None else "no key id ('kid')"
        raise Unauthorized(
            f"the token names {named} for {alg}, which the identity provider's key set "
            f"({self.source}) does not hold; sign in again for a token signed with a current key.",
            code="token_invalid",
        )

    def _find(self, kid: str | None, alg: str) -> jwt.PyJWK | None:
        if kid is None:
            # A provider with one key may leave it unnamed; with several, a token must say which.
            candidates = list(self._keys.values())
            found = candidates[0] if len(candidates) == 1 else None
        else:
            found = self._keys.get(kid)
        if found is None or found.algorithm_name != alg:
            return None
        return found

    async def _refresh(self) -> None:
        async with self._lock:
            if time.monotonic() - self._tried_at < MIN_FETCH_INTERVAL_S:
                return  # fetched a moment ago, by this call's wait or another token's
            self._tried_at = time.monotonic()
            try:
                keys = await asyncio.to_thread(self._fetch)
            except (OSError, ValueError) as exc:
                self._failure = str(exc)[:200]
                log.warning("could not read the identity provider's keys at %s: %s; keeping "
                            "the %d held", self.source, self._failure, len(self._keys))  # fmt: skip
                return
            self._keys, self._failure = keys, None
            self._fetched_at = time.monotonic()

    def _fetch(self) -> dict[str, jwt.PyJWK]:
        url = self.jwks_url
        if url is None:
            document = _get_json(self.source)
            url = document.get("jwks_uri") if isinstance(document, dict) else None
            if not isinstance(url, str) or not url.startswith(("https://", "http://")):
                raise ValueError("its discovery document names no jwks_uri")
        return parse_key_set(_get_json(url), self.algorithms)


def parse_key_set(document: Any, algorithms: tuple[str, ...]) -> dict[str, jwt.PyJWK]:
    """The signing keys of a JWKS document usable with ``algorithms``, by ``kid``; keys for
    encryption, of other algorithms or that PyJWT cannot read are left out. Raises ValueError
    when none is left."""
    listed = document.get("keys") if isinstance(document, dict) else None
    if not isinstance(listed, list):
        raise ValueError("the key set is not a JSON object with a 'keys' list")
    keys: dict[str, jwt.PyJWK] = {}
    for i, data in enumerate(listed):
        if not isinstance(data, dict) or data.get("use", "sig") != "sig":
            continue
        try:
            key = jwt.PyJWK(data)
        except (jwt.PyJWKError, jwt.InvalidKeyError, ValueError, TypeError):
            continue
        if key.algorithm_name in algorithms:
            keys[str(data.get("kid", f"#{i}"))] = key
    if not keys:
        raise ValueError(f"the key set holds no signing key for {', '.join(algorithms)}")
    return keys


def _get_json(url: str) -> Any:
    request = urllib.request.Request(url, headers={"Accept": "application/json"})
    with urllib.request.urlopen(request, timeout=FETCH_TIMEOUT_S) as response:  # noqa: S310
        body = response.read(MAX_DOCUMENT_BYTES + 1)
    if len(body) > MAX_DOCUMENT_BYTES:
        raise ValueError(f"{url} answered more than {MAX_DOCUMENT_BYTES} bytes")
    try:
        return json.loads(body)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{url} answered something that is not JSON ({exc})") from None
