"""Kill Kafka brokers under load: one of three SIGKILLed while events are published, viewed and
followed; started again; then the same with the pipeline's driver killed while a broker is down.
Meanwhile a version of ``entities`` is rebuilt from the topic's first record (``liveviews
rebuild``), beside the serving one: the first kill comes while it is built, and the second kills
its builder with the pipeline, which resumes it.

The log is a topic of three Kafka nodes of this test's own (replication factor 3,
``min.insync.replicas`` 2: ``liveviews.log.kafka.broker``). A gateway process publishes to it
and serves subscribers; a pipeline process reads it with Spark's Kafka source. Chirp activity is
published all along through ``POST /v1/events``, each batch under an idempotency key, sent again
under that key when the answer is a 503 or is lost, as client-js does. Subscribers: an SSE
reader and a WebSocket carrying several subscriptions, each resuming across whatever ends its
stream (a duplicate or an out-of-order delta fails it at once), one of them on a user's own
timeline.

While a broker is down the other two must keep taking events. At the end the log must hold
exactly the acknowledged events, each once (an event acknowledged twice or appended without an
acknowledgement is a duplicate, one acknowledged and absent is a loss); the views must equal the
offline recomputation from the log (the rebuilt version's, for ``entities``) and the replay of
the change topic; every subscriber must end with the stored rows of the version it is served.

``LV_FAULT_KILLS`` broker kills (default 2; each second one also kills the pipeline while the
broker is down), ``LV_FAULT_SEED``.
"""

from __future__ import annotations

import time
import uuid

import pytest

from demo.chirp import app as chirp
from liveviews.changes.topic import ACTIVE_KEY
from liveviews.log.kafka.broker import KafkaCluster
from liveviews.pipeline import versions
from liveviews.pipeline.kafkalog import connector_jars
from tests.faults.clients import (
    ClientLoop,
    Publisher,
    Resumer,
    dev_token,
    sse_subscriber,
    ws_subscriber,
)
from tests.faults.ending import kafka_logged_once, wind_down_on_kafka
from tests.faults.harness import (
    PARTITIONS,
    SHARDS,
    Figures,
    Gateway,
    Knobs,
    Pipeline,
    wait_for_progress,
    wait_until,
)
from tests.support.checks import assert_served_views_consistent
from tests.support.gateway import free_port
from tests.support.kafkalog import read_kafka_log

KNOBS = Knobs.from_env(kills=2)
NODES = 3
DOWN_S = (4.0, 8.0)
"""How long a broker stays down: past the ~3 s in which the others fence it, so appends go on
without it for a while."""
FOLLOWED = [("activity", "global"), ("profiles", "u1"), ("profiles", "u2")]
REBUILT = "entities"
"""Rebuilt during the kills: the pipeline of the timeline the u3 subscriber follows."""


@pytest.mark.timeout(300 + 150 * KNOBS.kills)
def test_kafka_broker_kills_under_load_lose_and_double_nothing(store, store_url, tmp_path):
    assert connector_jars(), "Spark's Kafka source is not fetched: run scripts/setup.sh"
    rng = KNOBS.rng()
    figures = Figures("kafka_broker_kills", {"seed": KNOBS.seed})
    cluster = KafkaCluster(tmp_path / "kafka", nodes=NODES)
    topic = f"log-{uuid.uuid4().hex[:8]}"
    clients = ClientLoop()
    followers = [Resumer(f"ws-{v}-{k}", v, k) for v, k in FOLLOWED]
    watcher = Resumer("sse-activity", "activity", "global")
    reader = Resumer("ws-timeline-u3", "timeline", "u3")  # readable by u3 only
    pipeline_kills, acked_while_down, log = 0, [], []
    bootstrap = cluster.start()
    kafka = {"LV_KAFKA": bootstrap, "LV_KAFKA_TOPIC": topic}
    pipeline = Pipeline(store_url, tmp_path)
    # The builder at the serving pipeline's priority: in the idle class, on two cores shared
    # with three brokers, it would wait for moments that never come.
    pipeline.env.update(kafka, LV_REBUILD_NICENESS="0")
    gateway = Gateway(store_url, tmp_path, free_port(), **kafka)
    publisher = Publisher(gateway.url, KNOBS.seed, resend=True)
    try:
        gateway.start(timeout=60)
        pipeline.start()
        publisher.start()
        wait_for_progress(store, 0, pipeline)
        token = dev_token("watcher")
        clients.spawn(sse_subscriber(gateway.url, token, watcher, clients.halt))
        clients.spawn(ws_subscriber(gateway.url, token, followers, clients.halt))
        clients.spawn(ws_subscriber(gateway.url, dev_token("u3"), [reader], clients.halt))
        wait_until("the subscribers had deltas",
                   lambda: watcher.state.ids and followers[0].state.ids)  # fmt: skip
        # `liveviews rebuild entities`: its new version is built from the topic's first record
        # while the brokers are killed, and the pipeline with it the second time.
        serving = versions.read(store, REBUILT)
        versions.ask(store, REBUILT, "rebuild")
        asked = time.monotonic()
        wait_until("the rebuild began", lambda: (r := versions.read(store, REBUILT)) is not None
                   and r.next is not None, timeout=60)  # fmt: skip
        begun = versions.read(store, REBUILT)
        for n in range(KNOBS.kills):
            time.sleep(rng.uniform(1.0, 3.0))
            node = rng.randint(1, NODES)
            if n == 0:
                assert store.hget(ACTIVE_KEY, REBUILT) is None, "switched before the first kill"
            cluster.stop_node(node, kill=True)
            down_at, acked_at_kill = time.monotonic(), len(publisher.acked)
            if n % 2 == 1:  # the pipeline too, while the broker is down
                time.sleep(rng.uniform(0.5, 2.0))
                progress = store.xlen("lv:{m}:progress")
                pipeline.kill_jvm()
                pipeline_kills += 1
                pipeline.start()
                wait_for_progress(store, progress, pipeline)
            time.sleep(max(0.0, rng.uniform(*DOWN_S) - (time.monotonic() - down_at)))
            # Two of three nodes in sync are enough for acks=all: publishing went on.
            wait_until(f"events acknowledged with node {node} down",
                       lambda a=acked_at_kill: len(publisher.acked) > a + 10)  # fmt: skip
            acked_while_down.append(len(publisher.acked) - acked_at_kill)
            cluster.start_node(node)
            seen = len(watcher.state.ids)
            wait_until("the subscriber had deltas after the restart",
                       lambda s=seen: len(watcher.state.ids) > s, timeout=90)  # fmt: skip
        wait_until("readers were switched to the rebuilt version",
                   lambda: store.hget(ACTIVE_KEY, REBUILT) is not None, timeout=240)  # fmt: skip
        switched_after = time.monotonic() - asked
        rebuilt = versions.read(store, REBUILT)
        assert rebuilt is not None and serving is not None and rebuilt.active != serving.active
        # The version begun before the kills, resumed after the pipeline's: not begun again.
        assert begun is not None and rebuilt.active == begun.next, (begun, rebuilt)
        time.sleep(1)
        catch_up = wind_down_on_kafka(store, publisher, [watcher, reader, *followers])
        assert pipeline.alive(), pipeline.tail()
        log = read_kafka_log(bootstrap, topic, PARTITIONS, len(publisher.acked), timeout=60)
    finally:
        publisher.halt.set()
        clients.stop()
        gateway.stop()
        pipeline.stop()
        cluster.stop()
    kafka_logged_once(log, publisher.acked)
    deltas = assert_served_views_consistent(store, chirp, PARTITIONS, SHARDS, log=log)
    refused = {k: v for k, v in publisher.answers.items() if k != "202"}
    assert set(refused) <= {"503 log_unavailable"}, (refused, publisher.refused_bodies[:3])
    figures.values.update(
        broker_kills=KNOBS.kills,
        pipeline_kills=pipeline_kills,
        events_acknowledged=len(publisher.acked),
        acknowledged_while_a_broker_was_down=acked_while_down,
        batches_sent_again=publisher.resent,
        subscriber_resumes=sum(r.connects - 1 for r in [watcher, reader, *followers]),
        subscriber_deltas=sum(len(r.state.ids) for r in [watcher, reader, *followers]),
        rebuild_request_to_switch_s=round(switched_after, 1),
        deltas_checked=deltas,
        catch_up_s=round(catch_up, 1),
    )
    figures.print()
