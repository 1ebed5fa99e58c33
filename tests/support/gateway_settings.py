"""Gateway settings for tests: the layout of the root conftest's store, small limits."""

from __future__ import annotations

from liveviews.gateway.settings import GatewaySettings
from tests.support.gateway import free_port

SHARDS = 8
PARTITIONS = 4


def settings_for(store_url: str, **env: str) -> GatewaySettings:
    return GatewaySettings.from_env(
        {
            "REDIS_URL": store_url,
            "LV_PORT": str(free_port()),
            "LV_LOG_PARTITIONS": str(PARTITIONS),
            "LV_CHANGE_SHARDS": str(SHARDS),
            "LV_FEED_BLOCK_MS": "100",
            "LV_HEARTBEAT_SECONDS": "1",
            "LV_MAX_BODY_BYTES": "65536",
            "LV_MAX_BATCH_EVENTS": "50",
            "LV_MAX_SUBSCRIPTIONS_PER_SOCKET": "5",
            "LV_WS_AUTH_TIMEOUT_SECONDS": "1",
            **env,
        }
    )
