"""Gateway fixtures: real uvicorn servers over the session's store, started once per run and
stopped when the tests of ``tests/server`` are done: left running, each flush of the store by a
later test made them read it again and rewrite its layout (a test of the layout failed so).

``gateway`` has ordinary limits; ``tight_gateway`` has tiny buffers and limits so that the
slow-consumer and limit paths can be reached quickly. Both survive the per-test flush of the
store: their change feed notices the new store epoch and reads it from the start.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from tests.support.gateway import ServedGateway, Writer
from tests.support.gateway_settings import SHARDS, settings_for


@pytest.fixture(scope="package")
def gateway(store_url: str) -> Iterator[ServedGateway]:
    served = ServedGateway(settings_for(store_url)).start()
    yield served
    served.stop()


@pytest.fixture(scope="package")
def tight_gateway(store_url: str) -> Iterator[ServedGateway]:
    settings = settings_for(
        store_url,
        LV_SUBSCRIBER_BUFFER="8",
        LV_MAX_CONNECTIONS="3",
        LV_SEND_TIMEOUT_SECONDS="30",
        LV_CORS_ORIGINS="http://chirp.example",
        LV_ENV="production",
        LV_JWT_SECRET="a-test-secret-that-is-long-enough-for-hs256",
        LV_IDEMPOTENCY_SECONDS="600",
    )
    served = ServedGateway(settings).start()
    yield served
    served.stop()


@pytest.fixture()
def writer(store: redis.Redis) -> Writer:
    from demo.chirp import app

    return Writer(store, app, SHARDS)
