"""Kill Kafka brokers under load: one of three SIGKILLed while events are published, viewed and
followed; started again; then the same with the pipeline's driver killed while a broker is down.

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
offline recomputation from the log and the replay of the change topic; every subscriber must end
with the stored rows.

``LV_FAULT_KILLS`` broker kills (default 2; each second one also kills the pipeline while the
broker is down), ``LV_FAULT_SEED``.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter

import pytest

from liveviews.log.events import Offset
from liveviews.log.kafka.broker import KafkaCluster
from liveviews.pipeline.kafkalog import connector_jars
from tests.faults.clients import (
    ClientLoop,
    Publisher,
    Resumer,
    dev_token,
    sse_subscriber,
    ws_subscriber,
)
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
from tests.support.checks import assert_views_consistent
from tests.support.gateway import free_port, stored_rows
from tests.support.kafkalog import frontier_covers, read_kafka_log

KNOBS = Knobs.from_env(kills=2)
NODES = 3
DOWN_S = (4.0, 8.0)
"""How long a broker stays down: past the ~3 s in which the others fence it, so appends go on
without it for a while."""
FOLLOWED = [("activity", "global"), ("profiles", "u1"), ("profiles", "u2")]


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
    pipeline.env.update(kafka)
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
        for n in range(KNOBS.kills):
            time.sleep(rng.uniform(1.0, 3.0))
            node = rng.randint(1, NODES)
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
        time.sleep(1)
        publisher.stop()
        t0 = time.monotonic()
        acked = [Offset(p, i) for p, i in publisher.acked]
        wait_until("the views reflected every acknowledged event",
                   lambda: frontier_covers(store, acked), timeout=180)  # fmt: skip
        catch_up = time.monotonic() - t0
        assert pipeline.alive(), pipeline.tail()
        for r in [watcher, reader, *followers]:
            want = stored_rows(store, r.view, r.key, SHARDS)
            wait_until(f"{r.name} reached the stored rows",
                       lambda r=r, want=want: r.state.rows == want or r.failure is not None,
                       timeout=30)  # fmt: skip
            assert r.failure is None, f"{r.name}: {r.failure}"
        log = read_kafka_log(bootstrap, topic, PARTITIONS, len(publisher.acked), timeout=60)
    finally:
        publisher.halt.set()
        clients.stop()
        gateway.stop()
        pipeline.stop()
        cluster.stop()
    in_log = Counter((e.partition, e.id) for part in log for e in part)
    acked = Counter(publisher.acked)
    assert max(acked.values()) == 1, "an offset acknowledged twice"
    assert set(acked) - set(in_log) == set(), "acknowledged events missing from the log"
    assert set(in_log) - set(acked) == set(), "events in the log that no answer acknowledged"
    deltas = assert_views_consistent(store, PARTITIONS, SHARDS, log=log)
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
        deltas_checked=deltas,
        catch_up_s=round(catch_up, 1),
    )
    figures.print()
