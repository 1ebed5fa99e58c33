"""Snapshots over plain HTTP, operability endpoints, limits, CORS and the one error shape."""

from __future__ import annotations

import json
import re
from typing import Any

import aiohttp
import redis
from starlette.routing import Route

from liveviews.gateway.app import routes
from tests.support.gateway import ServedGateway, Writer, open_sse


async def test_a_snapshot_has_rows_frontier_position_and_an_etag(
    gateway: ServedGateway, store: redis.Redis, writer: Writer
) -> None:
    writer.write([("profiles", "alice", "profile", {"name": "A"})], {2: "9-0"})

    async with aiohttp.ClientSession(headers=gateway.headers()) as s:
        resp = await s.get(gateway.url + "/v1/views/profiles/alice")
        body = await resp.json()
        assert body["rows"] == {"profile": {"name": "A"}}
        assert body["frontier"] == {"2": "9-0"}
        etag = resp.headers["ETag"]
        again = await s.get(gateway.url + "/v1/views/profiles/alice",
                            headers={"If-None-Match": etag})  # fmt: skip
        assert again.status == 304 and again.headers["ETag"] == etag
        writer.write([("profiles", "alice", "profile", {"name": "B"})])
        changed = await s.get(gateway.url + "/v1/views/profiles/alice",
                              headers={"If-None-Match": etag})  # fmt: skip
        assert changed.status == 200 and changed.headers["ETag"] != etag
        # The position is a resume id: following from it sends nothing already read.
        sse = await open_sse(s, gateway.url + "/v1/views/profiles/alice/live",
                             {"Last-Event-ID": body["position"]})  # fmt: skip
        ev = await sse.next(skip=("progress",))
        assert ev.event == "delta" and ev.data["ops"][0]["value"] == {"name": "B"}
        await sse.close()
        missing = await s.get(gateway.url + "/v1/views/nope/x")
        assert (missing.status, (await missing.json())["code"]) == (404, "unknown_view")


async def test_health_readiness_metrics_and_openapi(
    gateway: ServedGateway, store: redis.Redis
) -> None:
    async with aiohttp.ClientSession() as s:
        assert (await s.get(gateway.url + "/healthz")).status == 200
        ready = await s.get(gateway.url + "/readyz")
        assert ready.status == 200, await ready.text()
        text = await (await s.get(gateway.url + "/metrics")).text()
        for name in ["lv_connections{transport=\"sse\"}", "lv_subscriptions",
                     "lv_deltas_in_total", "lv_deltas_out_total", "lv_bytes_out_total",
                     "lv_slow_consumer_total", "lv_change_feed_lag_seconds"]:  # fmt: skip
            assert f"\n{name} " in "\n" + text, name
        doc = await (await s.get(gateway.url + "/openapi.json")).json()

        # A route's parameter convertor ({key:keypath}) is not part of the documented path.
        def documented(route: Any) -> str:
            return re.sub(r":\w+}", "}", getattr(route, "path", ""))

        http_routes = {documented(r)
                       for r in routes(gateway.settings.dev_tokens) if isinstance(r, Route)}  # fmt: skip
        assert set(doc["paths"]) == http_routes
        for path, ops in doc["paths"].items():
            for method in ops:
                route = next(r for r in routes(True) if documented(r) == path)
                assert method.upper() in (route.methods or ()), (path, method)


async def test_unknown_paths_and_methods_answer_the_error_shape(gateway: ServedGateway) -> None:
    async with aiohttp.ClientSession() as s:
        nothing = await s.get(gateway.url + "/v2/nothing")
        assert (nothing.status, (await nothing.json())["code"]) == (404, "not_found")
        wrong = await s.delete(gateway.url + "/v1/events")
        body = await wrong.json()
        assert (wrong.status, body["code"]) == (405, "method_not_allowed")
        assert set(body) == {"code", "message"}


async def test_the_connection_limit_refuses_more_streams_and_sockets(
    tight_gateway: ServedGateway, store: redis.Redis
) -> None:
    gw = tight_gateway

    async with aiohttp.ClientSession(headers=gw.headers()) as s:
        streams = [await open_sse(s, gw.url + f"/v1/views/profiles/u{i}/live")
                   for i in range(3)]  # fmt: skip
        for stream in streams:
            await stream.next()
        full = await s.get(gw.url + "/v1/views/profiles/u9/live")
        assert (full.status, (await full.json())["code"]) == (503, "too_many_connections")
        ws = await s.ws_connect(gw.ws_url)
        refused = json.loads((await ws.receive()).data)
        assert refused["code"] == "too_many_connections"
        await ws.receive()
        assert ws.close_code == 1013
        for stream in streams:
            await stream.close()


async def test_cors_allows_the_configured_origins_only(tight_gateway: ServedGateway) -> None:
    async with aiohttp.ClientSession() as s:
        pre = {"Access-Control-Request-Method": "POST",
               "Access-Control-Request-Headers": "Authorization, Content-Type"}  # fmt: skip
        ok = await s.options(tight_gateway.url + "/v1/events",
                             headers={"Origin": "http://chirp.example", **pre})  # fmt: skip
        assert ok.headers["Access-Control-Allow-Origin"] == "http://chirp.example"
        assert ok.headers["Access-Control-Allow-Credentials"] == "true"
        other = await s.options(tight_gateway.url + "/v1/events",
                                headers={"Origin": "http://evil.example", **pre})  # fmt: skip
        assert "Access-Control-Allow-Origin" not in other.headers
        # A live stream's head goes through the same middleware as any response.
        live = await s.get(tight_gateway.url + "/v1/views/profiles/alice/live",
                           headers={"Origin": "http://chirp.example",
                                    **tight_gateway.headers()})  # fmt: skip
        assert live.status == 200
        assert live.headers["Access-Control-Allow-Origin"] == "http://chirp.example"
        live.close()


async def test_metrics_count_each_pipelines_dead_letters(
    gateway: ServedGateway, store: redis.Redis
) -> None:
    from liveviews.log import deadletters

    letters = [deadletters.letter("activity", f"0:{i}-0", deadletters.STAGE_VIEW, "boom")
               for i in (1, 2)]  # fmt: skip
    deadletters.record(store, letters)
    deadletters.record(store, letters)  # recorded once, however often a batch is replayed
    async with aiohttp.ClientSession() as s:
        text = await (await s.get(gateway.url + "/metrics")).text()
    assert 'lv_dead_letters{pipeline="activity"} 2' in text
    assert 'lv_dead_letters{pipeline="entities"} 0' in text
    assert store.xlen(deadletters.ORDER_STREAM) == 2
