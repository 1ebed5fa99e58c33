"""Kafka brokers run for the log (``liveviews.log.kafka.broker``): Apache Kafka's own jars, a
node that keeps its topics across a restart, and three nodes that lose no acknowledged append
when one of them is killed."""

from __future__ import annotations

import shutil
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from liveviews.log.kafka import broker
from liveviews.log.kafka.broker import KafkaCluster, KafkaUnavailable


def create_topic(bootstrap: str, partitions: int, replication: int = 1) -> str:
    topic = f"t-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, partitions, replication)]).values():
        future.result(30)
    return topic


def producer(bootstrap: str, **extra: Any) -> Producer:
    return Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                     "linger.ms": 0, **extra})  # fmt: skip


def append(bootstrap: str, topic: str, keys: list[str]) -> list[tuple[str, int, int]]:
    """Each key appended once (its value is its index); (key, partition, offset) acknowledged."""
    acked: list[tuple[str, int, int]] = []
    errors: list[Any] = []

    def delivered(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(err)
        else:
            acked.append((msg.value().decode(), msg.partition(), msg.offset()))

    p = producer(bootstrap)
    for i, key in enumerate(keys):
        p.produce(topic, str(i).encode(), key.encode(), on_delivery=delivered)
    assert p.flush(60) == 0
    assert not errors
    return acked


def read_all(bootstrap: str, topic: str, count: int, timeout: float = 60) -> list[Any]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})  # fmt: skip
    consumer.subscribe([topic])
    got: list[Any] = []
    deadline = time.monotonic() + timeout
    try:
        while len(got) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                continue
            got.append((msg.key().decode(), msg.value().decode(), msg.partition(), msg.offset()))
    finally:
        consumer.close()
    return got


def test_appends_are_read_back_once_each_in_the_order_of_their_key(kafka_bootstrap: str) -> None:
    topic = create_topic(kafka_bootstrap, 4)
    keys = [f"user-{i % 7}" for i in range(300)]
    acked = append(kafka_bootstrap, topic, keys)
    assert len(acked) == 300
    got = read_all(kafka_bootstrap, topic, 300)
    assert sorted(int(value) for _, value, _, _ in got) == list(range(300))
    for key in set(keys):  # one key, one partition: its appends in the order they were made
        values = [int(v) for k, v, _, _ in sorted(got, key=lambda g: g[3]) if k == key]
        assert values == sorted(values)
        assert len({p for k, _, p, _ in got if k == key}) == 1


def test_a_node_keeps_its_topics_and_address_across_a_restart(tmp_path: Path) -> None:
    cluster = KafkaCluster(tmp_path)
    with cluster as bootstrap:
        topic = create_topic(bootstrap, 2)
        append(bootstrap, topic, ["a", "b", "c"])
    again = KafkaCluster(tmp_path)
    assert again.bootstrap == bootstrap
    with again:
        assert sorted(v for _, v, _, _ in read_all(bootstrap, topic, 3)) == ["0", "1", "2"]


def test_a_cluster_id_that_begins_with_a_dash_formats_its_nodes(tmp_path: Path) -> None:
    """A base64url id begins with "-" once in 64 clusters."""
    (tmp_path / "cluster.id").write_text("-" + "A" * 21 + "\n")
    with KafkaCluster(tmp_path) as bootstrap:
        topic = create_topic(bootstrap, 1)
        assert len(append(bootstrap, topic, ["a"])) == 1


def test_kafka_opts_follow_each_nodes_own_jvm_options(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As in Kafka's start scripts: the user's options come after the node's, so they win."""
    monkeypatch.setenv("KAFKA_OPTS", "-Xmx300m  -Dlv.note='two words'")
    cluster = KafkaCluster(tmp_path)
    command = cluster._java(cluster.nodes[0], tmp_path, [broker.MAIN_CLASS])
    assert command.index("-Xmx512m") < command.index("-Xmx300m")
    assert command[command.index("-Xmx300m") + 1] == "-Dlv.note=two words"
    assert command[-3:] == ["-cp", f"{tmp_path}/*", broker.MAIN_CLASS]


def test_without_maven_it_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(broker, "libs_path", lambda pom=None: tmp_path / "kafka-absent")
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(KafkaUnavailable) as caught:
        broker.ensure_kafka()
    assert caught.value.code == "kafka_unavailable"
    assert "apt-get install maven" in caught.value.message
    assert not (tmp_path / "kafka-absent").exists()


def test_three_nodes_lose_no_acknowledged_append_when_one_is_killed(tmp_path: Path) -> None:
    """Replication factor 3, ``min.insync.replicas`` 2, ``acks=all``: an append acknowledged
    before, during or after a node's death is read back, and none twice."""
    cluster = KafkaCluster(tmp_path, nodes=3, heap="384m")
    with cluster as bootstrap:
        assert cluster.replication == 3
        topic = create_topic(bootstrap, 3, replication=3)
        acked: list[str] = []
        errors: list[Any] = []
        left: list[int] = []
        stop = threading.Event()

        def delivered(err: Any, msg: Any) -> None:
            (errors if err is not None else acked).append(err or msg.value().decode())

        def publish() -> None:
            p = producer(bootstrap, **{"message.timeout.ms": 60_000})
            i = 0
            while not stop.is_set():
                p.produce(topic, str(i).encode(), f"k{i % 11}".encode(), on_delivery=delivered)
                p.poll(0)
                i += 1
                time.sleep(0.002)
            left.append(p.flush(90))  # asserted below: a thread's assertion fails no test

        thread = threading.Thread(target=publish)
        thread.start()
        # The producer's first append waits for its idempotence id, which a fresh cluster may
        # take seconds to hand out; kill only once appends are being acknowledged.
        deadline = time.monotonic() + 60
        while len(acked) < 100 and time.monotonic() < deadline:
            time.sleep(0.1)
        cluster.stop_node(2, kill=True)
        at_kill = len(acked)
        time.sleep(8)
        before_restart = len(acked)
        cluster.start_node(2)
        time.sleep(2)
        stop.set()
        thread.join(120)
        assert left == [0], "appends were still unacknowledged after 90 s"
        assert not errors
        # Two of three nodes in sync still acknowledge appends (min.insync.replicas=2).
        assert at_kill > 0 and before_restart > at_kill
        got = read_all(bootstrap, topic, len(acked), timeout=90)
        values = [v for _, v, _, _ in got]
        assert len(values) == len(set(values)), "an append was stored twice"
        assert set(acked) <= set(values), "an acknowledged append was lost"


def test_a_cluster_given_a_port_takes_consecutive_ports_and_keeps_a_folder_s_own(
    tmp_path: Path,
) -> None:
    cluster = KafkaCluster(tmp_path / "k", nodes=3, port=41000)
    assert [(n.port, n.controller_port) for n in cluster.nodes] == [
        (41000, 41003), (41001, 41004), (41002, 41005)]  # fmt: skip
    assert cluster.bootstrap == "127.0.0.1:41000,127.0.0.1:41001,127.0.0.1:41002"
    folder = tmp_path / "k" / "node-1"
    folder.mkdir(parents=True)
    (folder / "ports").write_text("5000 5001\n")
    assert KafkaCluster(tmp_path / "k", nodes=3, port=41000).nodes[0].port == 5000
