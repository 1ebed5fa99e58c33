"""Fill a Kafka node's disk under load, then free it.

The log is a topic of one Kafka node of this test's own, whose folder is on a small file system
the test mounts (tmpfs), run as ``python -m liveviews.log.kafka.broker`` runs it: a node that
exits is started again (``KafkaCluster.keep_running``). A gateway process publishes to it and
serves subscribers; a pipeline process, under ``liveviews.supervise``, reads it with Spark's
Kafka source. Chirp activity is published all along, each batch under an idempotency key and
sent again after a 503 or a lost answer, as client-js does; an SSE subscriber follows
``activity/global``.

Kafka has no reserve of its own: a broker that cannot write its log directory takes it offline,
and with its only directory offline it exits. So while the disk is full: every publish is
answered 202 or 503 ``log_unavailable`` (never 202 for an event that was not written), the
gateway keeps serving snapshots from the store, and the node is started again and again, in
longer intervals, and exits. Once the file filling the disk is removed the node starts and
recovers its log; publishes are taken again and the subscriber receives again, with no one
restarting anything by hand. At the end the log holds exactly the acknowledged events, each
once, and the views equal the recomputation from the topic and the change topic's replay.

``LV_FAULT_STALL_S`` keeps the disk full that long (default 5 s); ``LV_FAULT_SEED``.
"""

from __future__ import annotations

import os
import threading
import time
import uuid

import pytest

from liveviews.log.kafka.broker import KafkaCluster
from liveviews.pipeline.kafkalog import connector_jars
from tests.faults.clients import (
    ClientLoop,
    Publisher,
    Resumer,
    dev_token,
    snapshot_served,
    sse_subscriber,
)
from tests.faults.ending import (
    kafka_logged_once,
    receives_again,
    taken_again,
    wind_down_on_kafka,
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
from tests.support.disk import fill, small_filesystem
from tests.support.gateway import free_port
from tests.support.kafkalog import read_kafka_log

KNOBS = Knobs.from_env(kills=1)
FULL_S = float(os.environ.get("LV_FAULT_STALL_S") or 0) or 5.0
DISK_MB = 200


@pytest.mark.timeout(600 + int(FULL_S))
def test_a_full_kafka_disk_refuses_publishes_keeps_reads_and_recovers(store, store_url, tmp_path):
    assert connector_jars(), "Spark's Kafka source is not fetched: run scripts/setup.sh"
    figures = Figures("kafka_disk_full", {"seed": KNOBS.seed, "full_s": FULL_S})
    with small_filesystem(tmp_path / "disk", DISK_MB) as disk:
        cluster = KafkaCluster(disk / "kafka")
        topic = f"log-{uuid.uuid4().hex[:8]}"
        serving = threading.Event()
        keeper = threading.Thread(target=cluster.keep_running, args=(serving,), daemon=True)
        clients = ClientLoop()
        watcher = Resumer("sse-activity", "activity", "global")
        log = []
        bootstrap = cluster.start()
        keeper.start()
        kafka = {"LV_KAFKA": bootstrap, "LV_KAFKA_TOPIC": topic}
        pipeline = Pipeline(store_url, tmp_path, supervised=True)
        pipeline.env.update(kafka)
        gateway = Gateway(store_url, tmp_path, free_port(), **kafka)
        publisher = Publisher(gateway.url, KNOBS.seed, resend=True)
        try:
            gateway.start(timeout=60)
            pipeline.start()
            publisher.start()
            wait_for_progress(store, 0, pipeline)
            clients.spawn(sse_subscriber(gateway.url, dev_token("watcher"), watcher, clients.halt))
            wait_until("the subscriber had deltas", lambda: len(watcher.state.ids) > 0)
            first = cluster.nodes[0].process
            assert first is not None
            filler = fill(disk, leave=0)
            full_at = time.monotonic()
            wait_until("the node exited on its full disk", lambda: first.poll() is not None, 60)
            exited_after_s = time.monotonic() - full_at
            acked_at_exit = len(publisher.acked)
            wait_until("a publish refused log_unavailable",
                       lambda: publisher.resent_after["503 log_unavailable"] > 0, 60)  # fmt: skip
            refused_after_s = time.monotonic() - full_at
            time.sleep(FULL_S)
            assert snapshot_served(gateway.url), "the gateway stopped serving reads"
            acked_while_full = len(publisher.acked) - acked_at_exit
            filler.unlink()
            freed_at = time.monotonic()
            taken_after_s = taken_again(publisher, freed_at, timeout=120)
            delivering_after_s = receives_again(watcher, freed_at)
            time.sleep(1)
            catch_up = wind_down_on_kafka(store, publisher, [watcher])
            assert pipeline.alive(), pipeline.tail()
            log = read_kafka_log(bootstrap, topic, PARTITIONS, len(publisher.acked), timeout=60)
        finally:
            serving.set()
            publisher.halt.set()
            clients.stop()
            gateway.stop()
            pipeline.stop()
            keeper.join(10)
            cluster.stop()
    kafka_logged_once(log, publisher.acked)
    deltas = assert_views_consistent(store, PARTITIONS, SHARDS, log=log)
    # A lost answer (the client's read timeout) is sent again under its key, as a 503 is.
    final = {k: v for k, v in publisher.answers.items() if k != "202" and not k.startswith("error")}
    assert final == {}, (final, publisher.refused_bodies[:3])
    assert set(publisher.resent_after) <= {"503 log_unavailable", "lost"}, publisher.resent_after
    figures.values.update(
        disk_mb=DISK_MB,
        node_exited_within_s=round(exited_after_s, 1),
        refused_within_s=round(refused_after_s, 1),
        events_acknowledged_while_full=acked_while_full,
        taken_again_within_s=round(taken_after_s, 1),
        delivering_again_within_s=round(delivering_after_s, 1),
        events_acknowledged=len(publisher.acked),
        batches_sent_again=dict(publisher.resent_after),
        pipeline_starts_under_supervisor=pipeline.supervised_starts(),
        deltas_checked=deltas,
        catch_up_s=round(catch_up, 1),
    )
    figures.print()
