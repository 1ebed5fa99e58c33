"""Gateway settings that cannot be combined by mistake: each refused at start with a sentence
that says what to set, and the dev token endpoint only where its tokens are worth nothing."""

from __future__ import annotations

import pytest

from liveviews.errors import ConfigurationError
from liveviews.gateway.settings import DEV_JWT_SECRET, GatewaySettings

SECRET = "a-deployment-secret-that-is-long-enough-for-hs256"


def settings(**env: str) -> GatewaySettings:
    return GatewaySettings.from_env({"LV_DATA_DIR": "/tmp/lv-unused", **env})


def refusal(**env: str) -> str:
    with pytest.raises(ConfigurationError) as caught:
        settings(**env)
    return caught.value.message


def test_nothing_set_is_dev_mode_with_dev_tokens_signed_with_the_public_secret() -> None:
    dev = settings()
    assert (dev.dev, dev.dev_tokens, dev.log_feed) == (True, True, True)
    assert dev.jwt_secret == DEV_JWT_SECRET


def test_a_secret_without_lv_env_is_refused_rather_than_served_in_dev_mode() -> None:
    """It used to give a dev-mode gateway whose /v1/dev/token signed tokens for anyone with
    the deployment's own secret."""
    message = refusal(LV_JWT_SECRET=SECRET)
    assert "LV_ENV=production" in message and "LV_ENV=dev" in message


def test_dev_mode_with_a_secret_verifies_with_it_and_issues_no_dev_tokens() -> None:
    dev = settings(LV_ENV="dev", LV_JWT_SECRET=SECRET)
    assert (dev.dev, dev.dev_tokens, dev.jwt_secret) == (True, False, SECRET)
    message = refusal(LV_ENV="dev", LV_JWT_SECRET=SECRET, LV_DEV_TOKENS="on")
    assert "LV_DEV_TOKENS" in message and "LV_JWT_SECRET" in message


def test_production_serves_with_its_secret_and_neither_dev_endpoint() -> None:
    prod = settings(LV_ENV="production", LV_JWT_SECRET=SECRET)
    assert (prod.dev, prod.dev_tokens, prod.log_feed) == (False, False, False)
    off = settings(LV_ENV="production", LV_JWT_SECRET=SECRET, LV_DEV_TOKENS="0", LV_LOG_FEED="0")
    assert (off.dev_tokens, off.log_feed) == (False, False)


@pytest.mark.parametrize("name", ["LV_DEV_TOKENS", "LV_LOG_FEED"])
def test_production_refuses_a_dev_endpoint_turned_on(name: str) -> None:
    message = refusal(LV_ENV="production", LV_JWT_SECRET=SECRET, **{name: "1"})
    assert name in message and "LV_ENV=production" in message


def test_production_refuses_the_public_dev_secret() -> None:
    assert "LV_JWT_SECRET" in refusal(LV_ENV="production", LV_JWT_SECRET=DEV_JWT_SECRET)
    assert "LV_JWT_SECRET" in refusal(LV_ENV="production")


@pytest.mark.parametrize("origins", ["*", "https://app.example, *", " * "])
def test_a_wildcard_cors_origin_is_refused(origins: str) -> None:
    """Credentials are always allowed here, so '*' would answer every origin as allowed."""
    message = refusal(LV_CORS_ORIGINS=origins)
    assert "'*'" in message and "LV_CORS_ORIGINS" in message


@pytest.mark.parametrize(
    "origin", ["app.example", "https://app.example/", "https://app.example/page", "null"]
)
def test_a_cors_origin_a_browser_never_sends_is_refused(origin: str) -> None:
    assert origin in refusal(LV_CORS_ORIGINS=origin)


def test_listed_origins_are_kept_as_written() -> None:
    listed = settings(LV_CORS_ORIGINS="https://app.example, http://localhost:3000")
    assert listed.cors_origins == ("https://app.example", "http://localhost:3000")


def test_idempotency_seconds_default_to_a_day_and_refuse_less_than_a_minute() -> None:
    assert settings().idempotency_seconds == 86_400
    assert settings(LV_IDEMPOTENCY_SECONDS="600").idempotency_seconds == 600
    assert "LV_IDEMPOTENCY_SECONDS" in refusal(LV_IDEMPOTENCY_SECONDS="30")
    assert "LV_IDEMPOTENCY_SECONDS" in refusal(LV_IDEMPOTENCY_SECONDS="a day")
