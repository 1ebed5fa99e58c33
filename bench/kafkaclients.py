"""Which Python client appends to Kafka on the gateway's publish path: aiokafka against
confluent-kafka (librdkafka), both as the gateway would call them, from its asyncio event loop.

    .venv/bin/python -m bench.kafkaclients [--quick] [--seconds 10] [--concurrency 100]

One Kafka node (``liveviews.log.kafka.broker``, Apache Kafka's own jars) on this machine, a
topic of 8 partitions; every client is an idempotent producer with ``acks=all``, as the log
needs, and sends each append on its own (``linger.ms`` 0): an HTTP request waits for its own
append's acknowledgement. Contenders:

- ``aiokafka``: ``AIOKafkaProducer.send_and_wait``, native asyncio.
- ``confluent-kafka``: ``Producer.produce`` with a delivery callback that resolves an asyncio
  future (``loop.call_soon_threadsafe``), a thread serving librdkafka's callbacks (``poll``).
- ``confluent-kafka aio``: the library's own ``confluent_kafka.aio.AIOProducer``, one message
  per batch (``batch_size=1``), so that nothing waits for a batch to fill.

Figures: latency of one append at a time (a lone publisher; 2,000, or as many as
``--seconds`` allow), then ``--concurrency`` appends
in flight for ``--seconds`` (a busy gateway): appends/s, latency, and the client's CPU per
append (this process's, librdkafka's threads included).

Writes bench/results/kafkaclients.json.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

from bench.common import Report, Row, percentile, save
from bench.moment import Moment
from liveviews.log.kafka.broker import KafkaCluster

TOPIC = "bench-log"
PARTITIONS = 8
VALUE = b'{"type":"renamed","user":"u1","name":"' + b"x" * 150 + b'"}'
KEYS = [f"user-{i}".encode() for i in range(1000)]

Append = Callable[[bytes, bytes], Awaitable[Any]]


@contextlib.asynccontextmanager
async def aiokafka_client(bootstrap: str) -> AsyncIterator[Append]:
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True,
                                acks="all", linger_ms=0)  # fmt: skip
    await producer.start()
    try:

        async def append(key: bytes, value: bytes) -> Any:
            return await producer.send_and_wait(TOPIC, value, key=key)

        yield append
    finally:
        await producer.stop()


def _confluent_conf(bootstrap: str) -> dict[str, Any]:
    return {"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
            "linger.ms": 0}  # fmt: skip


@contextlib.asynccontextmanager
async def confluent_client(bootstrap: str) -> AsyncIterator[Append]:
    from confluent_kafka import KafkaException, Producer

    loop = asyncio.get_running_loop()
    producer = Producer(_confluent_conf(bootstrap))
    stop = threading.Event()

    def serve() -> None:  # librdkafka calls delivery callbacks only from poll()
        while not stop.is_set():
            producer.poll(0.05)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()

    def resolve(future: asyncio.Future[Any], err: Any, msg: Any) -> None:
        if future.done():
            return
        if err is not None:
            future.set_exception(KafkaException(err))
        else:
            future.set_result((msg.partition(), msg.offset()))

    try:

        async def append(key: bytes, value: bytes) -> Any:
            future = loop.create_future()

            def delivered(err: Any, msg: Any) -> None:  # on librdkafka's poll thread
                loop.call_soon_threadsafe(resolve, future, err, msg)

            producer.produce(TOPIC, value, key, on_delivery=delivered)
            return await future

        yield append
    finally:
        await asyncio.to_thread(producer.flush, 10)
        stop.set()
        thread.join()


@contextlib.asynccontextmanager
async def confluent_aio_client(bootstrap: str) -> AsyncIterator[Append]:
    from confluent_kafka.aio import AIOProducer

    producer = AIOProducer(_confluent_conf(bootstrap), batch_size=1)
    try:

        async def append(key: bytes, value: bytes) -> Any:
            delivered = await producer.produce(TOPIC, value, key)
            return await delivered if asyncio.isfuture(delivered) else delivered

        yield append
    finally:
        await producer.close()


CLIENTS: dict[str, Callable[[str], contextlib.AbstractAsyncContextManager[Append]]] = {
    "aiokafka": aiokafka_client,
    "confluent-kafka": confluent_client,
    "confluent-kafka aio": confluent_aio_client,
}


async def one_at_a_time(append: Append, count: int, seconds: float) -> list[float]:
    """Latencies of ``count`` appends, one after another, or as many as ``seconds`` allow (a
    client that holds each append for a batch would otherwise take minutes)."""
    latencies = []
    until = time.perf_counter() + seconds
    for i in range(count):
        began = time.perf_counter()
        await append(KEYS[i % len(KEYS)], VALUE)
        latencies.append(time.perf_counter() - began)
        if began > until:
            break
    return latencies


async def in_flight(append: Append, concurrency: int, seconds: float) -> tuple[list[float], float]:
    """``concurrency`` publishers appending one after another for ``seconds``; the latencies
    and the wall time."""
    latencies: list[float] = []
    began = time.perf_counter()
    until = began + seconds

    async def publisher(n: int) -> None:
        i = n
        while time.perf_counter() < until:
            t = time.perf_counter()
            await append(KEYS[i % len(KEYS)], VALUE)
            latencies.append(time.perf_counter() - t)
            i += concurrency

    await asyncio.gather(*(publisher(n) for n in range(concurrency)))
    return latencies, time.perf_counter() - began


def _ms(values: list[float]) -> dict[str, float]:
    return {f"p{q}": round(percentile(values, q) * 1000, 2) for q in (50, 99)}


async def measure(name: str, bootstrap: str, count: int, concurrency: int,
                  seconds: float) -> dict[str, Any]:  # fmt: skip
    async with CLIENTS[name](bootstrap) as append:
        await one_at_a_time(append, 50, 2.0)  # connections made, producer id acquired
        lone = await one_at_a_time(append, count, seconds)
        cpu = time.process_time()
        busy, wall = await in_flight(append, concurrency, seconds)
        cpu = time.process_time() - cpu
    row: dict[str, Any] = {
        "client": name,
        "one_at_a_time": len(lone),
        "one_at_a_time_ms": _ms(lone),
        "concurrency": concurrency,
        "appends_per_second": round(len(busy) / wall),
        "in_flight_ms": _ms(busy),
        "client_cpu_us_per_append": round(cpu / len(busy) * 1e6, 1),
    }
    print(f"{name:>20}: alone p50 {row['one_at_a_time_ms']['p50']} p99 "
          f"{row['one_at_a_time_ms']['p99']} ms; {concurrency} in flight "
          f"{row['appends_per_second']:,}/s p50 {row['in_flight_ms']['p50']} p99 "
          f"{row['in_flight_ms']['p99']} ms, {row['client_cpu_us_per_append']} µs CPU/append",
          flush=True)  # fmt: skip
    return row


def create_topic(bootstrap: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)]).values():
        future.result(30)


def run(quick: bool = False, seconds: float = 10.0, concurrency: int = 100,
        name: str = "kafkaclients") -> Report:  # fmt: skip
    count = 200 if quick else 2000
    seconds = 2.0 if quick else seconds
    moment = Moment()
    rows: list[dict[str, Any]] = []
    with (
        tempfile.TemporaryDirectory(prefix="lv-bench-kafka-") as tmp,
        KafkaCluster(Path(tmp)) as bootstrap,
    ):
        create_topic(bootstrap)
        for client in CLIENTS:
            rows.append(asyncio.run(measure(client, bootstrap, count, concurrency, seconds)))
    figures: dict[str, Any] = {"partitions": PARTITIONS, "value_bytes": len(VALUE),
                               "seconds": seconds, "clients": rows}  # fmt: skip
    save(name, figures, moment)
    by = {r["client"]: r for r in rows}
    other = by["aiokafka"]
    summary = [
        Row(f"Kafka append, one at a time, p50 / p99 ({c})",
            f"{by[c]['one_at_a_time_ms']['p50']} / {by[c]['one_at_a_time_ms']['p99']} ms")
        for c in CLIENTS
    ] + [
        Row(f"Kafka appends/s, {concurrency} in flight, and client CPU per append ({c})",
            f"{by[c]['appends_per_second']:,}/s, {by[c]['client_cpu_us_per_append']} µs",
            baseline=(f"aiokafka: {other['appends_per_second']:,}/s, "
                      f"{other['client_cpu_us_per_append']} µs") if c != "aiokafka" else "")
        for c in CLIENTS
    ]  # fmt: skip
    return Report(name, "Kafka clients on the gateway's publish path",
                  "python -m bench.kafkaclients", figures, summary,
                  moment=moment.finish())  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.kafkaclients",
                                     description=__doc__.split("\n\n")[0])  # fmt: skip
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--concurrency", type=int, default=100)
    args = parser.parse_args()
    run(args.quick, args.seconds, args.concurrency)


if __name__ == "__main__":
    main()
