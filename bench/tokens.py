"""What verifying a token costs a connection: HS256 with the gateway's secret against RS256,
ES256 and EdDSA with an identity provider's keys.

    .venv/bin/python -m bench.tokens [--quick] [--tokens 2000] [--rounds 5]

Each connection (an SSE request, a WebSocket's sign-in) verifies its token once, through the
gateway's own ``Authenticator`` (``liveviews.gateway.auth``): the provider's key set is served
by a local HTTP server and fetched once, before the timing, as a running gateway holds it. The
figure is CPU time per verification on one core, the best of ``--rounds`` rounds of
``--tokens`` distinct tokens each (the signature is checked in full every time: the gateway
caches keys, not verdicts).
"""

from __future__ import annotations

import argparse
import asyncio
import http.server
import json
import threading
import time
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from bench.common import Report, Row, save
from bench.moment import Moment
from liveviews.gateway.auth import Authenticator
from liveviews.gateway.keys import ProviderKeys

ISSUER = "https://idp.example"
AUDIENCE = "liveviews"
SECRET = "a-secret-of-at-least-thirty-two-bytes-for-hs256"
ALGORITHMS = ("HS256", "RS256", "ES256", "EdDSA")


def private_key(alg: str) -> Any:
    if alg == "RS256":
        return rsa.generate_private_key(public_exponent=65537, key_size=2048)
    if alg == "ES256":
        return ec.generate_private_key(ec.SECP256R1())
    return ed25519.Ed25519PrivateKey.generate()


def public_jwk(alg: str, key: Any) -> dict[str, Any]:
    algorithm = jwt.get_algorithm_by_name(alg)
    jwk: dict[str, Any] = json.loads(algorithm.to_jwk(key.public_key()))
    return {**jwk, "kid": alg, "alg": alg, "use": "sig"}


class KeySet(http.server.ThreadingHTTPServer):
    """An identity provider's key set served on 127.0.0.1, as a context manager. ``mode`` is
    what it answers (``keys``; ``garbage``; ``slow``: the keys, 2 s late) and ``fetches`` how
    often it was asked, for the gateway's tests of a failing key set."""

    def __init__(self, document: dict[str, Any]) -> None:
        self.document, self.mode, self.fetches = document, "keys", 0
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the standard library's name
                server.fetches += 1
                if server.mode == "slow":
                    time.sleep(2)
                body = (b"<html>oops" if server.mode == "garbage"
                        else json.dumps(server.document).encode())  # fmt: skip
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/jwks"

    def __enter__(self) -> KeySet:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.shutdown()
        self.server_close()


def tokens_for(alg: str, key: Any, n: int) -> list[str]:
    now = int(time.time())
    signing = SECRET if alg == "HS256" else key
    return [
        jwt.encode(
            {
                "sub": f"u{i}",
                "scope": "read",
                "aud": AUDIENCE,
                "exp": now + 3600,
                **({} if alg == "HS256" else {"iss": ISSUER}),
            },
            signing,
            algorithm=alg,
            headers={"kid": alg},
        )  # fmt: skip
        for i in range(n)
    ]


async def cost_us(auth: Authenticator, tokens: list[str], rounds: int) -> float:
    """CPU µs per ``auth.verify``, best of ``rounds``."""
    await auth.verify(tokens[0])  # the key set fetched, as a running gateway holds it
    best = float("inf")
    for _ in range(rounds):
        began = time.process_time()
        for token in tokens:
            await auth.verify(token)
        best = min(best, (time.process_time() - began) / len(tokens) * 1e6)
    return best


def run(quick: bool = False, tokens: int = 2000, rounds: int = 5, name: str = "tokens") -> Report:
    if quick:
        tokens, rounds = 100, 2
    moment = Moment()
    keys = {alg: private_key(alg) for alg in ALGORITHMS if alg != "HS256"}
    with KeySet({"keys": [public_jwk(alg, key) for alg, key in keys.items()]}) as server:
        provider = ProviderKeys(("RS256", "ES256", "EdDSA"), server.url, ISSUER)
        auth = Authenticator(SECRET, AUDIENCE, provider=provider)
        figures: dict[str, Any] = {"tokens": tokens, "rounds": rounds, "us_per_verify": {}}
        for alg in ALGORITHMS:
            signed = tokens_for(alg, keys.get(alg), tokens)
            figures["us_per_verify"][alg] = round(asyncio.run(cost_us(auth, signed, rounds)), 1)
    save(name, figures, moment)
    per = figures["us_per_verify"]
    rows = [
        Row(f"token verification, {alg} (CPU per connection)", f"{per[alg]:,} µs",
            baseline=f"HS256: {per['HS256']:,} µs" if alg != "HS256" else "")
        for alg in ALGORITHMS
    ]  # fmt: skip
    return Report("tokens", "What verifying a token costs a connection", "python -m bench.tokens",
                  figures, rows, moment=moment.finish())  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.tokens",
                                     description=__doc__.split("\n\n")[0])  # fmt: skip
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--tokens", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    report = run(args.quick, args.tokens, args.rounds)
    for row in report.rows:
        print(f"{row.figure}: {row.measured}")


if __name__ == "__main__":
    main()
