"""A gateway whose log is Kafka (``LV_KAFKA``): the same answers as on Redis Streams, from
``POST /v1/events`` through the pipeline's Kafka source to a subscriber, against a real Kafka
node, the session's store and its SparkSession."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import redis

from liveviews.gateway.app import create_app
from liveviews.log.kafka.broker import KafkaCluster
from liveviews.log.kafka.topic import LogUnavailable
from liveviews.pipeline.kafkalog import connector_jars
from liveviews.pipeline.settings import Settings
from liveviews.store.embedded import free_port
from tests.server.test_gateway_pipeline import covered
from tests.support.gateway import ServedGateway, State, open_sse, stored_rows
from tests.support.gateway_settings import settings_for
from tests.support.kafkalog import read_kafka_log
from tests.support.pipeline import RunningPipeline


@pytest.fixture()
def kafka_settings(settings: Settings, kafka_bootstrap: str) -> Settings:
    assert connector_jars(), "Spark's Kafka source is not fetched: run scripts/setup.sh"
    return dataclasses.replace(settings, kafka=kafka_bootstrap,
                               kafka_topic=f"log-{uuid.uuid4().hex[:8]}")  # fmt: skip


@pytest.fixture()
def kafka_gateway(store_url: str, kafka_settings: Settings) -> Iterator[ServedGateway]:
    assert kafka_settings.kafka is not None
    base = settings_for(store_url, LV_KAFKA=kafka_settings.kafka)
    served = ServedGateway(dataclasses.replace(base, store=kafka_settings)).start()
    yield served
    served.stop()


def renamed(user: str, name: str) -> dict[str, Any]:
    return {"type": "profile_set", "payload": {"user": user, "name": name}}


async def test_published_events_reach_subscribers_through_a_kafka_log(
    spark: Any, kafka_gateway: ServedGateway, kafka_settings: Settings, store: redis.Redis
) -> None:
    gateway, running = kafka_gateway, RunningPipeline(spark, kafka_settings)
    try:
        async with aiohttp.ClientSession() as s:
            profile = State()
            sse = await open_sse(s, gateway.url + "/v1/views/profiles/bob/live",
                                 gateway.headers("bob"))  # fmt: skip
            profile.apply(await sse.next())
            resp = await s.post(gateway.url + "/v1/events", json=[renamed("bob", "Robert")],
                                headers=gateway.headers("bob"))  # fmt: skip
            assert resp.status == 202, await resp.text()
            (offset,) = (await resp.json())["offsets"]
            assert offset["id"].isdigit() and int(offset["id"]) >= 1  # Kafka's form
            while True:  # until a progress frame says the rename is in the views
                ev = await sse.next(timeout=90)
                profile.apply(ev)
                if ev.event == "progress" and covered(ev.data["frontier"], offset):
                    # A Kafka position holds no time: no lag, rather than a 0 that says none.
                    assert "lag_ms" not in ev.data
                    break
            assert profile.rows["profile"]["name"] == "Robert"
            assert profile.rows == stored_rows(store, "profiles", "bob", 8)
            await sse.close()
    finally:
        running.stop()
    (event,) = [e for part in read_kafka_log(kafka_settings.kafka or "", kafka_settings.kafka_topic,
                                              4, 1) for e in part]  # fmt: skip
    assert (event.partition, event.id) == (offset["partition"], offset["id"])
    assert event.payload == {"user": "bob", "name": "Robert"}


async def test_a_batch_or_event_sent_again_with_its_idempotency_key_is_appended_once(
    kafka_gateway: ServedGateway, kafka_settings: Settings
) -> None:
    gateway = kafka_gateway
    batch = [renamed("alice", "A"), renamed("alice", "Al"), {"type": "tweet_posted", "payload": {
        "user": "alice", "tweet": "alice:1", "text": "hi"}}]  # fmt: skip
    headers = {**gateway.headers("alice"), "Idempotency-Key": "batch-1"}
    async with aiohttp.ClientSession() as s:
        answers = []
        for _ in range(2):
            resp = await s.post(gateway.url + "/v1/events", json=batch, headers=headers)
            assert resp.status == 202, await resp.text()
            answers.append((await resp.json())["offsets"])
        assert answers[0] == answers[1]
        other = await s.post(gateway.url + "/v1/events", json=[renamed("alice", "B")],
                             headers=headers)  # fmt: skip
        assert other.status == 422
        assert (await other.json())["code"] == "idempotency_key_reused"
        lone = await s.post(gateway.url + "/v1/events", json=renamed("alice", "C"),
                            headers=gateway.headers("alice"))  # fmt: skip
        assert lone.status == 202, await lone.text()
        keyed = {**gateway.headers("alice"), "Idempotency-Key": "one-1"}
        ones = []
        for _ in range(2):
            one = await s.post(gateway.url + "/v1/events", json=renamed("alice", "D"),
                               headers=keyed)  # fmt: skip
            assert one.status == 202, await one.text()
            ones.append((await one.json())["offsets"])
        assert ones[0] == ones[1]
    events = [e for part in read_kafka_log(kafka_settings.kafka or "", kafka_settings.kafka_topic,
                                           4, 5) for e in part]  # fmt: skip
    assert sorted(e.payload.get("name", "tweet") for e in events) == ["A", "Al", "C", "D",
                                                                      "tweet"]  # fmt: skip


def test_a_gateway_whose_kafka_does_not_answer_refuses_to_start_with_a_sentence(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from liveviews.log.kafka import topic

    monkeypatch.setattr(topic, "ADMIN_TIMEOUT_S", 2.0)
    settings = settings_for(store_url, LV_KAFKA=f"127.0.0.1:{free_port()}")
    with pytest.raises(LogUnavailable) as caught:
        create_app(settings)
    assert "Kafka brokers did not answer" in caught.value.message


async def test_the_log_feed_streams_a_kafka_log_and_gives_new_readers_the_recent_events(
    kafka_gateway: ServedGateway,
) -> None:
    gateway = kafka_gateway
    tweets = [{"type": "tweet_posted", "payload": {"user": "alice", "tweet": f"alice:{i}",
                                                   "text": f"t{i}"}} for i in range(3)]  # fmt: skip
    async with aiohttp.ClientSession(headers=gateway.headers("alice")) as s:
        sse = await open_sse(s, gateway.url + "/v1/log/live", params={"recent": "0"})
        offsets = []
        for t in tweets:  # one at a time: each is its own record, in the order it was posted
            resp = await s.post(gateway.url + "/v1/events", json=t)
            assert resp.status == 202, await resp.text()
            offsets += (await resp.json())["offsets"]
        seen = [await sse.next(timeout=30, skip=("heartbeat",)) for _ in range(3)]
        assert [f.event for f in seen] == ["log"] * 3
        assert [(f.data["partition"], f.data["id"]) for f in seen] == [
            (o["partition"], o["id"]) for o in offsets]  # fmt: skip
        assert seen[0].data["payload"] == tweets[0]["payload"]
        await sse.close()
        again = await open_sse(s, gateway.url + "/v1/log/live", params={"recent": "2"})
        recent = [await again.next(timeout=30) for _ in range(2)]
        assert [f.data["payload"]["tweet"] for f in recent] == ["alice:1", "alice:2"]
        await again.close()


async def test_a_kafka_that_stops_answering_is_a_503_and_publishing_resumes_when_it_is_back(
    store_url: str, settings: Settings, tmp_path: Path
) -> None:
    """A broker of the test's own, stopped under a running gateway: a lone event, a keyed
    batch and a batch are each answered 503 ``log_unavailable`` with a sentence (no trace);
    started again, the same publishes go through, and the keyed batch is appended once."""
    cluster = KafkaCluster(tmp_path / "kafka")
    bootstrap = cluster.start()
    try:
        own = dataclasses.replace(settings, kafka=bootstrap, kafka_topic="log")
        base = settings_for(store_url, LV_KAFKA=bootstrap)
        gateway = ServedGateway(dataclasses.replace(base, store=own)).start()
        try:
            keyed = {**gateway.headers("bob"), "Idempotency-Key": "while-down"}
            batch = [renamed("bob", "B1"), renamed("bob", "B2")]
            # A connection per request: the broker's restart outlasts the gateway's keep-alive.
            connector = aiohttp.TCPConnector(force_close=True)
            async with aiohttp.ClientSession(connector=connector) as s:

                async def post(body: Any, headers: dict[str, str]) -> tuple[int, Any]:
                    async with s.post(gateway.url + "/v1/events", json=body,
                                      headers=headers) as resp:  # fmt: skip
                        return resp.status, await resp.json()

                assert (await post(renamed("bob", "up"), gateway.headers("bob")))[0] == 202
                cluster.stop_node(1)
                for body, headers in ((renamed("bob", "down"), gateway.headers("bob")),
                                      (batch, keyed), (batch, gateway.headers("bob"))):  # fmt: skip
                    status, answer = await post(body, headers)
                    assert (status, answer["code"]) == (503, "log_unavailable"), answer
                    assert "Kafka log" in answer["message"] and "Traceback" not in str(answer)
                cluster.start_node(1)
                status, first = await post(batch, keyed)
                assert status == 202, first
                assert (await post(batch, keyed)) == (202, first)
                assert (await post(renamed("bob", "again"), gateway.headers("bob")))[0] == 202
        finally:
            gateway.stop()
        names = [e.payload["name"] for part in read_kafka_log(bootstrap, "log", 4, 4)
                 for e in part]  # fmt: skip
        assert names.count("B1") == 1 and "up" in names and "again" in names
    finally:
        cluster.stop()


async def test_a_group_is_refused_on_a_kafka_log_with_a_sentence(
    kafka_gateway: ServedGateway,
) -> None:
    """Spark's Kafka source cannot stop at a cut, so no group can be released on a Kafka log:
    the gateway says so, over SSE and WebSocket, and what to do instead."""
    async with aiohttp.ClientSession() as s:
        url = f"{kafka_gateway.url}/v1/groups/live?view=profiles&key=ann&view=timeline&key=ann"
        async with s.get(url, headers=kafka_gateway.headers("ann")) as resp:
            body = await resp.json()
        assert (resp.status, body["code"]) == (422, "groups_unavailable"), body
        assert "Kafka" in body["message"] and "one by one" in body["message"]
        ws = await s.ws_connect(kafka_gateway.ws_url,
                                params={"access_token": kafka_gateway.token("ann")})  # fmt: skip
        assert (await ws.receive_json())["type"] == "authenticated"
        await ws.send_json({"type": "subscribe", "sub": "g", "members": [
            {"sub": "p", "view": "profiles", "key": "ann"}]})  # fmt: skip
        error = await ws.receive_json()
        assert (error["type"], error["sub"], error["code"]) == ("error", "g", "groups_unavailable")
        await ws.close()
