"""Settings of a gateway process, read once from the environment.

The store fields (``REDIS_URL``, ``LV_APP``, ``LV_LOG_PARTITIONS``, ``LV_CHANGE_SHARDS``, ...) are
the pipeline's own ``liveviews.pipeline.settings.Settings``, so both sides always agree on the
layout. The gateway adds its own ``LV_*`` variables, each with a default that runs on one machine.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from liveviews.errors import ConfigurationError
from liveviews.pipeline.settings import Settings, env_bool, env_int

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
ENVIRONMENTS = ("dev", "production")


def _float(env: dict[str, str], name: str, default: float) -> float:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigurationError(f"{name} must be a number of seconds, not {raw!r}.") from None
    if value <= 0:
        raise ConfigurationError(f"{name} must be more than 0, not {value}.")
    return value


def _per_second(env: dict[str, str], name: str, default: float) -> float:
    """A rate in events per second; ``0`` (or ``off``) means no limit."""
    raw = (env.get(name) or "").strip().lower()
    if raw == "":
        return default
    if raw == "off":
        return 0.0
    try:
        value = float(raw)
    except ValueError:
        raise ConfigurationError(
            f"{name} must be a number of events per second (0 or off for no limit), not {raw!r}."
        ) from None
    if not 0 <= value < float("inf"):
        raise ConfigurationError(f"{name} must be 0 (no limit) or more, not {raw!r}.")
    return value


def _dir(env: dict[str, str], name: str, default: Path) -> Path | None:
    """A directory to serve: unset means the default, ``off`` means serve nothing."""
    raw = (env.get(name) or "").strip()
    if not raw:
        return default
    if raw.lower() == "off":
        return None
    path = Path(raw).resolve()
    if not path.is_dir():
        raise ConfigurationError(f"{name} must name a directory; {raw!r} is not one.")
    return path


@dataclass(frozen=True)
class GatewaySettings:
    """Everything a gateway process needs; ``store`` is shared with the pipeline."""

    store: Settings
    host: str = "127.0.0.1"
    port: int = 8000
    environment: str = "dev"
    jwt_secret: str = DEV_JWT_SECRET
    jwt_audience: str = "liveviews"
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

    def __post_init__(self) -> None:
        if self.publish_rate and self.publish_burst < self.max_batch_events:
            raise ConfigurationError(
                f"LV_PUBLISH_BURST ({self.publish_burst}) must be at least LV_MAX_BATCH_EVENTS "
                f"({self.max_batch_events}), or a full batch could never be published."
            )
        if not 1 <= self.store_full_percent <= 100:
            raise ConfigurationError(
                f"LV_STORE_FULL_PERCENT must be from 1 to 100, not {self.store_full_percent}."
            )

    @property
    def dev(self) -> bool:
        return self.environment == "dev"

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
        if self.dev_tokens and self.jwt_secret != DEV_JWT_SECRET:
            raise ConfigurationError(
                "LV_DEV_TOKENS cannot be on with LV_JWT_SECRET set: /v1/dev/token would sign "
                "tokens for anyone with that secret. Dev tokens are signed with the public dev "
                "secret only: unset LV_JWT_SECRET, or LV_DEV_TOKENS."
            )

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> GatewaySettings:
        env = dict(os.environ if env is None else env)
        secret = env.get("LV_JWT_SECRET") or ""
        if secret and not env.get("LV_ENV"):
            # A secret is a deployment's; guessing its mode would either hand out dev tokens
            # signed with it or hide the demo from someone trying it out.
            raise ConfigurationError(
                "LV_JWT_SECRET is set but LV_ENV is not: set LV_ENV=production to serve with "
                "this secret, or LV_ENV=dev to try it on this machine (without dev tokens)."
            )
        environment = env.get("LV_ENV") or "dev"
        if environment not in ENVIRONMENTS:
            raise ConfigurationError(f"LV_ENV must be 'dev' or 'production', not {environment!r}.")
        dev = environment == "dev"
        dev_secret = not secret
        if not secret:
            if not dev:
                raise ConfigurationError(
                    "LV_JWT_SECRET is required when LV_ENV=production: set it to a random "
                    f"string of at least {MIN_SECRET_BYTES} bytes."
                )
            secret = DEV_JWT_SECRET
        elif len(secret.encode()) < MIN_SECRET_BYTES:
            raise ConfigurationError(
                f"LV_JWT_SECRET must be at least {MIN_SECRET_BYTES} bytes long for HS256."
            )
        origins = tuple(
            o.strip() for o in (env.get("LV_CORS_ORIGINS") or "").split(",") if o.strip()
        )
        settings = cls(
            store=Settings.from_env(env),
            host=env.get("LV_HOST") or "127.0.0.1",
            port=env_int(env, "LV_PORT", 8000, minimum=0),
            environment=environment,
            jwt_secret=secret,
            jwt_audience=env.get("LV_JWT_AUDIENCE") or "liveviews",
            dev_tokens=env_bool(env, "LV_DEV_TOKENS", dev and dev_secret),
            dev_token_ttl=env_int(env, "LV_DEV_TOKEN_TTL", 3600),
            cors_origins=origins,
            max_body_bytes=env_int(env, "LV_MAX_BODY_BYTES", 1_048_576),
            max_batch_events=env_int(env, "LV_MAX_BATCH_EVENTS", 1000),
            publish_rate=_per_second(env, "LV_PUBLISH_RATE", 100.0),
            publish_burst=env_int(env, "LV_PUBLISH_BURST", 1000),
            event_time_max_ahead_seconds=env_int(
                env, "LV_EVENT_TIME_MAX_AHEAD_SECONDS", 86_400, minimum=0
            ),
            event_time_max_age_days=env_int(env, "LV_EVENT_TIME_MAX_AGE_DAYS", 3650),
            store_full_percent=env_int(env, "LV_STORE_FULL_PERCENT", 90),
            store_memory_check_ms=env_int(env, "LV_STORE_MEMORY_CHECK_MS", 500, minimum=10),
            idempotency_seconds=env_int(env, "LV_IDEMPOTENCY_SECONDS", 86_400, minimum=60),
            append_retry_seconds=_float(env, "LV_APPEND_RETRY_SECONDS", 10.0),
            max_connections=env_int(env, "LV_MAX_CONNECTIONS", 10_000),
            max_connections_per_subject=env_int(
                env, "LV_MAX_CONNECTIONS_PER_SUBJECT", 100, minimum=0
            ),
            max_connections_per_address=env_int(
                env, "LV_MAX_CONNECTIONS_PER_ADDRESS", 1000, minimum=0
            ),
            max_unauthenticated=env_int(env, "LV_MAX_UNAUTHENTICATED", 256),
            max_subscriptions_per_socket=env_int(env, "LV_MAX_SUBSCRIPTIONS_PER_SOCKET", 100),
            subscriber_buffer=env_int(env, "LV_SUBSCRIBER_BUFFER", 256),
            heartbeat_seconds=_float(env, "LV_HEARTBEAT_SECONDS", 15.0),
            progress_interval_ms=env_int(env, "LV_PROGRESS_INTERVAL_MS", 250, minimum=0),
            workers=env_int(env, "LV_WORKERS", 1, minimum=1),
            send_timeout_seconds=_float(env, "LV_SEND_TIMEOUT_SECONDS", 10.0),
            header_timeout_seconds=_float(env, "LV_HEADER_TIMEOUT_SECONDS", 10.0),
            body_timeout_seconds=_float(env, "LV_BODY_TIMEOUT_SECONDS", 10.0),
            ws_auth_timeout_seconds=_float(env, "LV_WS_AUTH_TIMEOUT_SECONDS", 5.0),
            ws_compression=env_bool(env, "LV_WS_COMPRESSION", False),
            feed_block_ms=env_int(env, "LV_FEED_BLOCK_MS", 1000, minimum=10),
            log_feed=env_bool(env, "LV_LOG_FEED", dev),
            static_dir=_dir(env, "LV_STATIC_DIR", DEFAULT_STATIC_DIR),
            client_js_dir=_dir(env, "LV_CLIENT_JS_DIR", DEFAULT_CLIENT_JS_DIR),
        )
        settings.check_exposure()
        return settings
