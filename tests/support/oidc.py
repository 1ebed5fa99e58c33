"""A real OpenID Connect provider for the tests: oidc-provider (the certified Node.js
implementation, pinned in tests/support/oidc/package.json) run by tests/support/oidc/provider.mjs.

It signs JWT access tokens (RS256, ES256 or EdDSA) for one resource server with the
client_credentials grant, and publishes its keys at its jwks_uri::

    with OidcProvider([generate_key("ES256", "k1")]) as idp:
        token = idp.token(scope="read publish")    # aud "liveviews", iss idp.issuer
        idp.rotate(generate_key("ES256", "k2"))    # k2 signs from now on; k1 still verifies
        idp.retire("k1")                           # tokens signed with k1 no longer verify

The provider runs as a child of the test process on a free port of 127.0.0.1 and stops with the
``with`` block; it also stops by itself when the test process ends without stopping it (it
watches the pipe of its stdin). A restart (``rotate``, ``retire``) keeps the port, hence the
issuer. It keeps nothing across a restart but its keys: the JWT access tokens need nothing else.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from base64 import b64encode
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm

from liveviews.store.embedded import free_port

HERE = Path(__file__).resolve().parent / "oidc"
SCRIPT = HERE / "provider.mjs"
INSTALL = (
    "run `make .venv/.installed` (scripts/setup.sh installs it with npm ci in tests/support/oidc)"
)
ALGS = ("RS256", "ES256", "EdDSA")
"""The signing algorithms the harness makes keys for."""

Jwk = dict[str, Any]


class TokenRefused(Exception):
    """The token endpoint answered with an error (``status``, and its JSON ``body``)."""

    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"the token endpoint answered {status}: {body}")
        self.status = status
        self.body = body


@dataclass
class Client:
    """A confidential client allowed the client_credentials grant. ``subject`` is its tokens'
    ``sub`` (by default its id); ``claims`` are added to its tokens, e.g.
    ``{"realm_access": {"roles": ["read"]}}``."""

    client_id: str
    client_secret: str = "secret"
    subject: str | None = None
    claims: dict[str, Any] = field(default_factory=dict)

    def as_config(self) -> dict[str, Any]:
        out: dict[str, Any] = {"client_id": self.client_id, "client_secret": self.client_secret}
        if self.subject is not None:
            out["subject"] = self.subject
        if self.claims:
            out["claims"] = self.claims
        return out


def node() -> str:
    """The node program, and the harness's packages installed; a clear error otherwise."""
    found = shutil.which("node")
    if found is None:
        raise AssertionError(
            f"node is not installed: the OIDC provider of the tests needs it; {INSTALL}."
        )
    installed = HERE / "node_modules" / "oidc-provider" / "package.json"
    if not installed.exists():
        raise AssertionError(
            f"oidc-provider is not installed in {HERE / 'node_modules'}: {INSTALL}."
        )
    pinned = json.loads((HERE / "package.json").read_text())["dependencies"]["oidc-provider"]
    version = json.loads(installed.read_text())["version"]
    if version != pinned:
        raise AssertionError(
            f"{HERE / 'node_modules'} has oidc-provider {version}, package.json pins {pinned}: {INSTALL}."
        )
    return found


def generate_key(alg: str, kid: str) -> Jwk:
    """A new private JWK for ``alg``: RS256 (RSA 2048), ES256 (P-256) or EdDSA (Ed25519), with
    ``kid``, ``alg`` and ``use: "sig"``."""
    key: Jwk
    if alg == "RS256":
        rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        key = RSAAlgorithm.to_jwk(rsa_key, as_dict=True)
    elif alg == "ES256":
        key = ECAlgorithm.to_jwk(ec.generate_private_key(ec.SECP256R1()), as_dict=True)
    elif alg == "EdDSA":
        key = OKPAlgorithm.to_jwk(ed25519.Ed25519PrivateKey.generate(), as_dict=True)
    else:
        raise ValueError(f"no keys for {alg!r}: one of {', '.join(ALGS)}")
    return {**key, "kid": kid, "alg": alg, "use": "sig"}


def public(key: Mapping[str, Any]) -> Jwk:
    """The public half of a private JWK."""
    private = {"d", "p", "q", "dp", "dq", "qi", "oth"}
    return {k: v for k, v in key.items() if k not in private}


class OidcProvider:
    """oidc-provider on 127.0.0.1, as a context manager (see the module's docstring).

    ``keys`` are private JWKs (by default one new RS256 key): the first signs, all are published.
    ``alg`` is the tokens' signing algorithm (by default the first key's). Tokens are for
    ``audience`` (their ``aud``), which clients name by the resource indicator ``resource``
    (oidc-provider takes only absolute URIs there: by default ``urn:liveviews:<audience>``,
    or the audience itself when it is one), and may carry the scopes of ``scope``; they live
    ``access_token_ttl`` seconds. ``clients`` are the clients (by default one, ``liveviews-tests``,
    whose tokens have ``sub`` "liveviews-tests"); the first is the default of ``token``. ``claims``
    are added to every token.
    """

    def __init__(
        self,
        keys: Sequence[Jwk] | None = None,
        *,
        alg: str | None = None,
        audience: str = "liveviews",
        resource: str | None = None,
        scope: str = "read publish service",
        access_token_ttl: int = 3600,
        clients: Sequence[Client] | None = None,
        claims: Mapping[str, Any] | None = None,
        port: int | None = None,
        start_timeout: float = 30.0,
    ) -> None:
        self.keys: list[Jwk] = list(keys) if keys else [generate_key(alg or "RS256", "key-1")]
        self.alg: str = alg or self.keys[0]["alg"]
        self.audience = audience
        self.resource = resource or (
            audience if urllib.parse.urlsplit(audience).scheme else f"urn:liveviews:{audience}"
        )
        self.scope = scope
        self.access_token_ttl = access_token_ttl
        self.clients: list[Client] = list(clients) if clients else [Client("liveviews-tests")]
        self.claims: dict[str, Any] = dict(claims or {})
        self.port = port or free_port()
        self.start_timeout = start_timeout
        self.start_seconds: float | None = None
        """How long the last start took, until the provider listened."""
        self._dir: Path | None = None
        self._process: subprocess.Popen[bytes] | None = None

    # Where it is.

    @property
    def issuer(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def discovery_url(self) -> str:
        return f"{self.issuer}/.well-known/openid-configuration"

    @property
    def jwks_uri(self) -> str:
        return f"{self.issuer}/jwks"

    @property
    def token_endpoint(self) -> str:
        return f"{self.issuer}/token"

    @property
    def kid(self) -> str:
        """The kid of the key that signs."""
        kid: str = self.keys[0]["kid"]
        return kid

    @property
    def pid(self) -> int | None:
        """The provider's process id while it runs."""
        return self._process.pid if self.running and self._process is not None else None

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    # Running it.

    def __enter__(self) -> OidcProvider:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def start(self) -> OidcProvider:
        """Start the provider with its current configuration; return once it listens."""
        if self._process is not None and self._process.poll() is None:
            raise AssertionError(f"the OIDC provider on port {self.port} runs already")
        program = node()
        if self._dir is None:
            self._dir = Path(tempfile.mkdtemp(prefix="lv-oidc-"))
        config = self._dir / "config.json"
        config.write_text(json.dumps(self.config(), indent=1))
        log_path = self._dir / "provider.out"
        started_at = log_path.stat().st_size if log_path.exists() else 0
        began = time.monotonic()
        with open(log_path, "ab") as log:
            self._process = subprocess.Popen(
                [program, str(SCRIPT), str(config), str(self.port)],
                cwd=HERE,
                stdin=subprocess.PIPE,  # it stops once this pipe closes: see provider.mjs
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, "OIDC_STOP_ON_STDIN_EOF": "1"},
            )
        ready = f"ready {self.issuer}"
        deadline = began + self.start_timeout
        try:
            while True:
                output = self._output(started_at)
                if any(line.strip() == ready for line in output.splitlines()):
                    self.start_seconds = time.monotonic() - began
                    return self
                if self._process.poll() is not None:
                    raise AssertionError(
                        f"the OIDC provider exited ({self._process.returncode}) before it listened "
                        f"on port {self.port}:\n{output}"
                    )
                if time.monotonic() > deadline:
                    raise AssertionError(
                        f"the OIDC provider did not listen on port {self.port} within "
                        f"{self.start_timeout:.0f} s:\n{output}"
                    )
                time.sleep(0.02)
        except BaseException:
            self.stop()
            raise

    def stop(self, timeout: float = 10) -> None:
        """Stop the provider: SIGTERM, then SIGKILL after ``timeout`` seconds."""
        proc, self._process = self._process, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if proc.stdin is not None:
            proc.stdin.close()

    def close(self) -> None:
        """Stop the provider and remove its files."""
        try:
            self.stop()
        finally:
            if self._dir is not None:
                shutil.rmtree(self._dir, ignore_errors=True)
                self._dir = None

    def restart(self) -> None:
        """Stop and start again on the same port, hence with the same issuer."""
        self.stop()
        self.start()

    def rotate(self, new_key: Jwk) -> None:
        """Sign with ``new_key`` from now on, still publishing the keys before it (tokens they
        signed go on verifying); returns once the provider listens again."""
        if any(k["kid"] == new_key["kid"] for k in self.keys):
            raise ValueError(f"the provider has a key {new_key['kid']!r} already")
        self.keys = [new_key, *self.keys]
        if new_key.get("alg"):
            self.alg = new_key["alg"]
        self.restart()

    def retire(self, kid: str) -> None:
        """Stop publishing the key ``kid`` (tokens it signed no longer verify); returns once the
        provider listens again. The signing key cannot be retired: rotate first."""
        if kid == self.kid:
            raise ValueError(f"{kid!r} signs: rotate to another key before retiring it")
        kept = [k for k in self.keys if k["kid"] != kid]
        if len(kept) == len(self.keys):
            raise ValueError(f"the provider has no key {kid!r}")
        self.keys = kept
        self.restart()

    def output(self) -> str:
        """Everything the provider printed, over all its starts."""
        return self._output(0)

    def config(self) -> dict[str, Any]:
        """What provider.mjs reads."""
        return {
            "keys": {"keys": self.keys},
            "alg": self.alg,
            "audience": self.audience,
            "resource": self.resource,
            "scope": self.scope,
            "access_token_ttl": self.access_token_ttl,
            "claims": self.claims,
            "clients": [c.as_config() for c in self.clients],
        }

    # Using it.

    def client(self, client_id: str | None = None) -> Client:
        if client_id is None:
            return self.clients[0]
        for c in self.clients:
            if c.client_id == client_id:
                return c
        raise KeyError(f"the provider has no client {client_id!r}")

    def token(
        self, client: str | None = None, scope: str = "read publish", resource: str | None = None
    ) -> str:
        """An access token (a JWT) from the client_credentials grant, for ``client`` (by default
        the first), asking for ``scope`` at ``resource`` (by default the provider's). The token
        has the scopes asked that the resource server allows."""
        answer = self.token_response(client, scope, resource)
        token: str = answer["access_token"]
        return token

    def token_response(
        self, client: str | None = None, scope: str = "read publish", resource: str | None = None
    ) -> dict[str, Any]:
        """The token endpoint's whole answer (``access_token``, ``expires_in``, ``scope``...);
        raises ``TokenRefused`` when it refuses."""
        c = self.client(client)
        form = {"grant_type": "client_credentials", "resource": resource or self.resource}
        if scope:
            form["scope"] = scope
        basic = b64encode(
            f"{urllib.parse.quote(c.client_id)}:{urllib.parse.quote(c.client_secret)}".encode()
        ).decode()
        request = urllib.request.Request(
            self.token_endpoint,
            data=urllib.parse.urlencode(form).encode(),
            headers={
                "Authorization": f"Basic {basic}",
                "Content-Type": "application/x-www-form-urlencoded",
            },
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                answer: dict[str, Any] = json.load(response)
        except urllib.error.HTTPError as e:
            raise TokenRefused(e.code, e.read().decode(errors="replace")) from None
        return answer

    def discovery(self) -> dict[str, Any]:
        """The provider's discovery document."""
        return _get_json(self.discovery_url)

    def jwks(self) -> dict[str, Any]:
        """The public keys the provider publishes at its jwks_uri."""
        return _get_json(self.jwks_uri)

    def _output(self, offset: int) -> str:
        if self._dir is None:
            return ""
        path = self._dir / "provider.out"
        if not path.exists():
            return ""
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read().decode(errors="replace")


def _get_json(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url, timeout=10) as response:
        out: dict[str, Any] = json.load(response)
    return out
