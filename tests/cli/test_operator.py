"""``GET /v1/operator/views/{view}/{key}?as_of=``: what ``liveviews inspect --json --as-of``
prints, from a real gateway, only to the holder of ``LV_OPERATOR_TOKEN``."""

from __future__ import annotations

from collections.abc import Iterator

import aiohttp
import pytest
import redis

from liveviews.changes.topic import history_stream
from tests.cli.conftest import Pipelines, Run
from tests.cli.test_inspect import _history
from tests.support.gateway import ServedGateway
from tests.support.gateway_settings import settings_for

TOKEN = "an-operator-token-for-tests"


@pytest.fixture(scope="module")
def gateway(store_url: str) -> Iterator[ServedGateway]:
    served = ServedGateway(settings_for(store_url, LV_OPERATOR_TOKEN=TOKEN)).start()
    yield served
    served.stop()


@pytest.fixture()
def operator() -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKEN}"}


async def _get(gateway: ServedGateway, path: str, headers: dict[str, str] | None = None) -> tuple:
    async with aiohttp.ClientSession() as s:
        resp = await s.get(gateway.url + path, headers=headers or {})
        return resp.status, await resp.json(), resp.headers


async def test_the_same_document_as_the_command_line(
    gateway: ServedGateway, operator: dict[str, str], run: Run, store: redis.Redis,
    pipelines: Pipelines,
) -> None:  # fmt: skip
    offsets = [o for o, _ in _history(store, pipelines)]
    for offset in (offsets[0], offsets[3]):
        status, body, headers = await _get(
            gateway, f"/v1/operator/views/profiles/alice?as_of={offset}", operator
        )
        assert status == 200, body
        assert body == run.json("inspect", "profiles", "alice", "--as-of", offset)
        assert headers["Cache-Control"] == "no-store"
    status, body, _ = await _get(
        gateway, f"/v1/operator/views/profiles/alice?as_of={offsets[2]}&deltas=1", operator
    )
    assert status == 200 and [d["batch"] for d in body["deltas"]] == [2]


async def test_without_the_setting_there_is_no_such_endpoint(
    store_url: str, store: redis.Redis
) -> None:
    without = ServedGateway(settings_for(store_url)).start()
    try:
        status, body, _ = await _get(without, "/v1/operator/views/profiles/alice?as_of=0:1-0",
                                     {"Authorization": "Bearer anything"})  # fmt: skip
    finally:
        without.stop()
    assert (status, body["code"]) == (404, "not_found")


async def test_a_missing_or_wrong_token_is_refused(
    gateway: ServedGateway, operator: dict[str, str], store: redis.Redis
) -> None:
    path = "/v1/operator/views/profiles/alice?as_of=0:1-0"
    for headers in ({}, {"Authorization": "Bearer not-it"}, {"Authorization": f"Basic {TOKEN}"}):
        status, body, sent = await _get(gateway, path, headers)
        assert (status, body["code"]) == (401, "token_invalid"), headers
        assert sent["WWW-Authenticate"] == "Bearer"
        assert set(body) == {"code", "message"}


async def test_history_gone_unreflected_unknown_and_malformed(
    gateway: ServedGateway, operator: dict[str, str], store: redis.Redis, pipelines: Pipelines
) -> None:
    offsets = [o for o, _ in _history(store, pipelines)]
    store.xtrim(history_stream("profiles"), maxlen=1, approximate=False)
    (unread,) = pipelines.append({"type": "profile_set", "payload": {"user": "alice", "name": "z"}})
    for path, expected in [
        (f"/v1/operator/views/profiles/alice?as_of={offsets[0]}", (410, "history_gone")),
        (f"/v1/operator/views/profiles/alice?as_of={unread}", (409, "not_reflected")),
        (f"/v1/operator/views/nope/alice?as_of={offsets[0]}", (404, "unknown_view")),
        ("/v1/operator/views/profiles/alice", (400, "invalid_offset")),
        ("/v1/operator/views/profiles/alice?as_of=yesterday", (400, "invalid_offset")),
        ("/v1/operator/views/profiles/alice?as_of=7:1-0", (400, "invalid_offset")),
        (f"/v1/operator/views/profiles/alice?as_of={offsets[4]}&deltas=x",
         (400, "invalid_parameter")),
    ]:  # fmt: skip
        status, body, _ = await _get(gateway, path, operator)
        assert (status, body["code"]) == expected, (path, body)
        assert body["message"].endswith(".")
