"""Settings of a gateway process, read once from the environment and the settings file
(``liveviews.config``).

The store fields (``REDIS_URL``, ``LV_APP``, ``LV_LOG_PARTITIONS``, ``LV_CHANGE_SHARDS``, ...) are
the pipeline's own ``liveviews.pipeline.settings.Settings``, so both sides always agree on the
layout. The gateway adds its own ``LV_*`` variables, each with a default that runs on one machine.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from liveviews.config import catalog as C
from liveviews.config.declare import Setting
from liveviews.config.layers import environment
from liveviews.errors import ConfigurationError
from liveviews.pipeline.settings import Settings

DEV_JWT_SECRET = "liveviews-dev-secret-never-use-in-production"
"""The signing secret in dev mode when ``LV_JWT_SECRET`` is unset; public, so never safe."""

REPO = Path(__file__).resolve().parent.parent
DEFAULT_STATIC_DIR = REPO / "demo" / "web"
"""Where a checkout keeps the demo's pages; an installed package has none, and serves the pages
of the folder ``LV_STATIC_DIR`` names."""
PACKAGED_CLIENT_JS = Path(__file__).resolve().parent / "client_js"
"""The JavaScript client an installed package carries (setup.py copies it in)."""
DEFAULT_CLIENT_JS_DIR = (
    PACKAGED_CLIENT_JS if PACKAGED_CLIENT_JS.is_dir() else REPO / "client-js" / "src"
)

MIN_SECRET_BYTES = 32
ORIGIN_RE = re.compile(r"https?://[^/\s?#@]+", re.IGNORECASE)


@dataclass(frozen=True)
class GatewaySettings:
    """Everything a gateway process needs; ``store`` is shared with the pipeline."""

    store: Settings
    host: str = "127.0.0.1"
    port: int = 8000
    environment: str = "dev"
    jwt_secret: str | None = DEV_JWT_SECRET
    """The HS256 secret; None when only an identity provider's tokens are taken."""
    jwt_audience: str = "liveviews"
    jwt_issuer: str | None = None
    """The identity provider's issuer (``LV_JWT_ISSUER``); None: no provider, unless
    ``jwks_url`` names its keys."""
    jwks_url: str | None = None
    jwt_algorithms: tuple[str, ...] = ("RS256", "ES256", "EdDSA")
    jwt_leeway_seconds: int = 30
    jwt_subject_claim: str = "sub"
    jwt_scope_claim: str = "scope"
    dev_tokens: bool = True
    dev_token_ttl: int = 3600
    cors_origins: tuple[str, ...] = ()
    max_body_bytes: int = 1_048_576
    max_batch_events: int = 1000
    publish_rate: float = 100.0
    """Events per second each subject may publish, on average (0: no limit)."""
    publish_burst: int = 1000
    """Events a subject may publish at once after a pause; at least ``max_batch_events``."""
    event_time_max_ahead_seconds: int = 86_400
    event_time_max_age_days: int = 3650
    store_full_percent: int = 90
    """Publishing is refused while the store uses more than this share of its maxmemory."""
    store_memory_check_ms: int = 500
    idempotency_seconds: int = 86_400
    """How long a batch published with an idempotency key is remembered: sent again within it,
    it is answered with the same offsets and appended no second time."""
    append_retry_seconds: float = 10.0
    """How long a publish retries a log partition through a store cluster's failover before it
    answers 503 (``partial_append`` if other partitions were appended)."""
    max_connections: int = 10_000
    max_connections_per_subject: int = 100
    """Connections one subject may hold in this process (0: no limit)."""
    max_connections_per_address: int = 1000
    """Connections one client address may hold in this process (0: no limit); generous, since
    users behind one NAT, or behind a proxy not in ``FORWARDED_ALLOW_IPS``, share an address."""
    max_unauthenticated: int = 256
    """WebSockets that may wait to sign in at once, apart from the connection slots."""
    max_subscriptions_per_socket: int = 100
    subscriber_buffer: int = 256
    heartbeat_seconds: float = 15.0
    progress_interval_ms: int = 250
    quiet_progress_ms: int = 5000
    workers: int = 1
    send_timeout_seconds: float = 10.0
    header_timeout_seconds: float = 10.0
    body_timeout_seconds: float = 10.0
    ws_auth_timeout_seconds: float = 5.0
    ws_compression: bool = False
    feed_block_ms: int = 1000
    log_feed: bool = True
    static_dir: Path | None = DEFAULT_STATIC_DIR
    client_js_dir: Path | None = DEFAULT_CLIENT_JS_DIR
    operator_token: str | None = None
    """The bearer token of the operator endpoint (liveviews.gateway.api.operator); None: no
    such endpoint."""

    def __post_init__(self) -> None:
        if self.publish_rate and self.publish_burst < self.max_batch_events:
            raise ConfigurationError(
                f"LV_PUBLISH_BURST ({self.publish_burst}) must be at least LV_MAX_BATCH_EVENTS "
                f"({self.max_batch_events}), or a full batch could never be published."
            )

    @property
    def dev(self) -> bool:
        return self.environment == "dev"

    @property
    def provider(self) -> bool:
        """Are an identity provider's tokens taken?"""
        return self.jwt_issuer is not None or self.jwks_url is not None

    def check_exposure(self) -> None:
        """Refuse the combinations that would hand out tokens or events to anyone."""
        if "*" in self.cors_origins:
            raise ConfigurationError(
                "LV_CORS_ORIGINS cannot contain '*': this gateway allows credentials, so '*' "
                "would let a page of any origin act as its signed-in user. List the origins."
            )
        for origin in self.cors_origins:
            if ORIGIN_RE.fullmatch(origin) is None:
                raise ConfigurationError(
                    f"LV_CORS_ORIGINS lists {origin!r}, which is not an origin: write each as "
                    "a browser sends it, scheme://host[:port], e.g. https://app.example.com."
                )
        if not self.dev:
            for name, on, what in (
                ("LV_DEV_TOKENS", self.dev_tokens, "/v1/dev/token signs a token for anyone"),
                ("LV_LOG_FEED", self.log_feed, "/v1/log/live shows every event to every reader"),
            ):
                if on:
                    raise ConfigurationError(
                        f"{name} cannot be on when LV_ENV=production: {what}. Unset it."
                    )
            if self.jwt_secret == DEV_JWT_SECRET:
                raise ConfigurationError(
                    "LV_JWT_SECRET cannot be the public dev secret when LV_ENV=production."
                )
        if self.jwks_url is not None and self.jwt_issuer is None and not self.dev:
            raise ConfigurationError(
                "LV_JWKS_URL is set without LV_JWT_ISSUER: with LV_ENV=production a provider's "
                "tokens must name their issuer, else any issuer whose keys that set holds could "
                "sign in. Set LV_JWT_ISSUER to the provider's issuer URL."
            )
        if self.dev_tokens and self.jwt_secret != DEV_JWT_SECRET:
            raise ConfigurationError(
                "LV_DEV_TOKENS cannot be on with LV_JWT_SECRET set: /v1/dev/token would sign "
                "tokens for anyone with that secret. Dev tokens are signed with the public dev "
                "secret only: unset LV_JWT_SECRET, or LV_DEV_TOKENS."
            )

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> GatewaySettings:
        env = environment(env)
        secret = C.JWT_SECRET.read(env) or ""
        if secret and C.ENV.raw(env) is None:
            # A secret is a deployment's; guessing its mode would either hand out dev tokens
            # signed with it or hide the demo from someone trying it out.
            raise ConfigurationError(
                "LV_JWT_SECRET is set but LV_ENV is not: set LV_ENV=production to serve with "
                "this secret, or LV_ENV=dev to try it on this machine (without dev tokens)."
            )
        environment_name = C.ENV.get(env)
        dev = environment_name == "dev"
        dev_secret = not secret
        issuer, jwks_url = C.JWT_ISSUER.read(env), C.JWKS_URL.read(env)
        provider = issuer is not None or jwks_url is not None
        hs256: str | None = secret
        if not secret:
            if not dev and not provider:
                raise ConfigurationError(
                    "LV_JWT_SECRET or an identity provider (LV_JWT_ISSUER) is required when "
                    f"LV_ENV=production: set the secret to a random string of at least "
                    f"{MIN_SECRET_BYTES} bytes, or name the provider whose tokens to take."
                )
            # In production with a provider, no HS256 token is taken; in dev, the public dev
            # secret's are, beside the provider's.
            hs256 = DEV_JWT_SECRET if dev else None
        elif len(secret.encode()) < MIN_SECRET_BYTES:
            raise ConfigurationError(
                f"LV_JWT_SECRET must be at least {MIN_SECRET_BYTES} bytes long for HS256."
            )
        dev_tokens = C.DEV_TOKENS.read(env)
        log_feed = C.LOG_FEED.read(env)
        store = Settings.from_env(env)
        settings = cls(
            store=store,
            host=C.HOST.get(env),
            port=C.PORT.get(env),
            environment=environment_name,
            jwt_secret=hs256,
            jwt_audience=C.JWT_AUDIENCE.get(env),
            jwt_issuer=issuer,
            jwks_url=jwks_url,
            jwt_algorithms=C.JWT_ALGORITHMS.get(env),
            jwt_leeway_seconds=C.JWT_LEEWAY_SECONDS.get(env),
            jwt_subject_claim=C.JWT_SUBJECT_CLAIM.get(env),
            jwt_scope_claim=C.JWT_SCOPE_CLAIM.get(env),
            dev_tokens=dev and dev_secret if dev_tokens is None else dev_tokens,
            dev_token_ttl=C.DEV_TOKEN_TTL.get(env),
            cors_origins=C.CORS_ORIGINS.get(env),
            max_body_bytes=C.MAX_BODY_BYTES.get(env),
            max_batch_events=C.MAX_BATCH_EVENTS.get(env),
            publish_rate=C.PUBLISH_RATE.get(env),
            publish_burst=C.PUBLISH_BURST.get(env),
            event_time_max_ahead_seconds=C.EVENT_TIME_MAX_AHEAD_SECONDS.get(env),
            event_time_max_age_days=C.EVENT_TIME_MAX_AGE_DAYS.get(env),
            store_full_percent=C.STORE_FULL_PERCENT.get(env),
            store_memory_check_ms=C.STORE_MEMORY_CHECK_MS.get(env),
            idempotency_seconds=C.IDEMPOTENCY_SECONDS.get(env),
            append_retry_seconds=C.APPEND_RETRY_SECONDS.get(env),
            max_connections=C.MAX_CONNECTIONS.get(env),
            max_connections_per_subject=C.MAX_CONNECTIONS_PER_SUBJECT.get(env),
            max_connections_per_address=C.MAX_CONNECTIONS_PER_ADDRESS.get(env),
            max_unauthenticated=C.MAX_UNAUTHENTICATED.get(env),
            max_subscriptions_per_socket=C.MAX_SUBSCRIPTIONS_PER_SOCKET.get(env),
            subscriber_buffer=C.SUBSCRIBER_BUFFER.get(env),
            heartbeat_seconds=C.HEARTBEAT_SECONDS.get(env),
            progress_interval_ms=C.PROGRESS_INTERVAL_MS.get(env),
            quiet_progress_ms=C.QUIET_PROGRESS_MS.get(env),
            workers=C.WORKERS.get(env),
            send_timeout_seconds=C.SEND_TIMEOUT_SECONDS.get(env),
            header_timeout_seconds=C.HEADER_TIMEOUT_SECONDS.get(env),
            body_timeout_seconds=C.BODY_TIMEOUT_SECONDS.get(env),
            ws_auth_timeout_seconds=C.WS_AUTH_TIMEOUT_SECONDS.get(env),
            ws_compression=C.WS_COMPRESSION.get(env),
            feed_block_ms=C.FEED_BLOCK_MS.get(env),
            log_feed=dev if log_feed is None else log_feed,
            static_dir=_folder(C.STATIC_DIR, env, DEFAULT_STATIC_DIR),
            client_js_dir=_folder(C.CLIENT_JS_DIR, env, DEFAULT_CLIENT_JS_DIR),
            operator_token=C.OPERATOR_TOKEN.read(env),
        )
        settings.check_exposure()
        return settings


def _folder(setting: Setting[Path | None], env: Mapping[str, str], default: Path) -> Path | None:
    """Unset: the default; ``off``: serve nothing."""
    return default if setting.raw(env) is None else setting.read(env)
