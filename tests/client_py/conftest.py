"""A gateway serving the application of ``tests.support.queryapp`` (a listable view of tasks
and a ranked view of scores), a writer of its views through the real sink, and a TCP proxy
in front of it to cut connections on purpose."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
import redis

from tests.client_py.proxy import Proxy
from tests.support.gateway import ServedGateway, Writer
from tests.support.gateway_settings import SHARDS, settings_for

QUERY_APP = "tests.support.queryapp:app"


@pytest.fixture(scope="package")
def gateway(store_url: str) -> Iterator[ServedGateway]:
    # A long progress interval: a frontier that comes early came because the client asked.
    settings = settings_for(store_url, LV_APP=QUERY_APP, LV_PROGRESS_INTERVAL_MS="4000")
    served = ServedGateway(settings).start()
    yield served
    served.stop()


@pytest.fixture()
def writer(store: redis.Redis) -> Writer:
    from tests.support.queryapp import app

    return Writer(store, app, SHARDS)


@pytest.fixture()
async def proxy(gateway: ServedGateway) -> AsyncIterator[Proxy]:
    running = await Proxy(gateway.settings.port).start()
    yield running
    await running.close()
