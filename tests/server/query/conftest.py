"""A gateway serving the application of ``tests.support.queryapp``, and a writer of its views
through the real sink."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from tests.support.gateway import ServedGateway, Writer
from tests.support.gateway_settings import SHARDS, settings_for


@pytest.fixture(scope="package")
def query_gateway(store_url: str) -> Iterator[ServedGateway]:
    served = ServedGateway(
        # Progress often, so that the randomized test checks what subscribers hold at many
        # frontiers.
        settings_for(
            store_url,
            LV_APP="tests.support.queryapp:app",
            LV_SUBSCRIBER_BUFFER="64",
            LV_PROGRESS_INTERVAL_MS="20",
            LV_QUIET_PROGRESS_MS="40",
        )
    ).start()
    yield served
    served.stop()


@pytest.fixture()
def query_writer(store: redis.Redis) -> Writer:
    from tests.support.queryapp import app

    return Writer(store, app, SHARDS)
