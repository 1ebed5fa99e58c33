"""``liveviews tail``: the log as it is appended, one line per event, across partitions."""

from __future__ import annotations

import time
from collections.abc import Generator
from typing import Any

import click
import orjson

from liveviews.cli.base import Env, emit, json_option, pass_env
from liveviews.log.events import decode_entry, entry_id_tuple, iso, log_stream
from liveviews.log.kafka.clients import kafka_config
from liveviews.log.kafka.records import decode_record, position
from liveviews.log.kafka.topic import ADMIN_TIMEOUT_S, LogUnavailable
from liveviews.pipeline.settings import Settings
from liveviews.store.client import Client, is_cluster

Reads = Generator[list[dict[str, Any]], None, None]
"""The log's events, one read at a time."""
BLOCK_MS = 1000
CLUSTER_POLL_S = 0.2
COUNT = 500


def heads(client: Client, partitions: int, from_start: bool) -> dict[str, str]:
    """Where each partition's reading starts: its first entry, or after its newest one now.

    The newest ids are resolved once, not left to ``$``, which means "newest" anew at every
    read and would skip what was appended between two of them."""
    streams = {log_stream(p): "0-0" for p in range(partitions)}
    if from_start:
        return streams
    with client.pipeline(transaction=False) as pipe:
        for stream in streams:
            pipe.xrevrange(stream, count=1)
        newest: list[Any] = pipe.execute()
    for stream, last in zip(list(streams), newest, strict=True):
        if last:
            streams[stream] = last[0][0].decode()
    return streams


def _read(client: Client, streams: dict[str, str]) -> list[Any]:
    """What each partition has after ``streams``: one read waiting up to ``BLOCK_MS`` for any
    of them; on a store cluster, where one read cannot span slots, one read per partition in
    a pipeline, and a pause when none had anything."""
    if not is_cluster(client):
        found: Any = client.xread(streams, count=COUNT, block=BLOCK_MS)  # type: ignore[arg-type]
        return list(found or [])
    with client.pipeline(transaction=False) as pipe:
        for stream, after in streams.items():
            pipe.xread({stream: after}, count=COUNT)
        answers: list[Any] = pipe.execute()
    read = [entry for answer in answers for entry in answer or []]
    if not read:
        time.sleep(CLUSTER_POLL_S)
    return read


def line(stream: bytes, entry_id: bytes, fields: dict[bytes, bytes]) -> dict[str, Any]:
    """One event as printed; an entry that is not a well-formed event shows its raw fields."""
    partition = int(stream.decode().rsplit(":", 1)[1])
    offset = f"{partition}:{entry_id.decode()}"
    try:
        e = decode_entry(partition, entry_id, fields)
        payload = orjson.loads(e.payload_json)
        return {"offset": offset, "type": e.type, "key": e.key, "time": e.time_ms,
                "payload": payload}  # fmt: skip
    except (KeyError, ValueError):
        raw = {k.decode(errors="replace"): v.decode(errors="replace") for k, v in fields.items()}
        return {"offset": offset, "type": raw.get("type"), "key": raw.get("key"),
                "time": None, "payload": None, "raw": raw}  # fmt: skip


def _text(event: dict[str, Any]) -> str:
    when = iso(event["time"]) if isinstance(event["time"], int) else "-"
    body = orjson.dumps(event["payload"] if event["payload"] is not None else event.get("raw"))
    return f"{event['offset']}  {event['type']}  {event['key']}  {when}  {body.decode()}"


@click.command()
@click.option("--type", "types", multiple=True, metavar="TYPE",
              help="Only events of this type (repeat for several).")  # fmt: skip
@click.option("--key", "keys", multiple=True, metavar="KEY",
              help="Only events of this partition key (repeat for several).")  # fmt: skip
@click.option("--from-start", is_flag=True, help="Begin with the log's oldest events.")
@click.option("--limit", type=click.IntRange(min=1), default=None,
              help="Stop after this many events (default: until Ctrl-C).")  # fmt: skip
@json_option
@pass_env
def tail(
    env: Env,
    types: tuple[str, ...],
    keys: tuple[str, ...],
    from_start: bool,
    limit: int | None,
    as_json: bool,
) -> None:
    """Print the log's events as they are appended: offset, type, key, time and payload. With
    --json, one JSON object per line. Ctrl-C ends it (exit 0)."""
    kafka = env.settings.kafka
    reads = kafka_reads(env.settings, from_start) if kafka else store_reads(env, from_start)
    shown = 0
    try:
        for events in reads:
            for event in events:
                if (types and event["type"] not in types) or (keys and event["key"] not in keys):
                    continue
                if as_json:
                    emit(event)
                else:
                    click.echo(_text(event))
                shown += 1
                if limit is not None and shown >= limit:
                    return
    except KeyboardInterrupt:
        return
    finally:
        reads.close()


def store_reads(env: Env, from_start: bool) -> Reads:
    """The store's log, one read's events at a time, in the order the store took them."""
    client = env.client
    streams = heads(client, env.settings.log_partitions, from_start)
    while True:
        events = []
        for stream, entries in _read(client, streams) or []:
            streams[stream.decode()] = entries[-1][0].decode()
            events += [line(stream, entry_id, fields) for entry_id, fields in entries]
        # One read's events in the order the store took them, whatever their partition.
        events.sort(key=lambda e: entry_id_tuple(e["offset"].partition(":")[2]))
        yield events


def kafka_reads(settings: Settings, from_start: bool) -> Reads:
    """A Kafka log's committed events, one read at a time, in the order the brokers took them.
    Each partition's end is resolved once, at the start, as ``heads`` does."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    assert settings.kafka is not None
    consumer = Consumer(kafka_config(settings.kafka, **{
        "group.id": "liveviews-tail", "enable.auto.commit": False,
        "isolation.level": "read_committed"}))  # fmt: skip
    try:
        starts = []
        for p in range(settings.log_partitions):
            low, high = consumer.get_watermark_offsets(
                TopicPartition(settings.kafka_topic, p), ADMIN_TIMEOUT_S)  # fmt: skip
            starts.append(TopicPartition(settings.kafka_topic, p, low if from_start else high))
        consumer.assign(starts)
        while True:
            got = consumer.consume(COUNT, BLOCK_MS / 1000)
            events = [(m.timestamp()[1], kafka_line(m)) for m in got if m.error() is None]
            yield [e for _, e in sorted(events, key=lambda pair: pair[0])]
    except KafkaException as exc:
        raise LogUnavailable(f"the Kafka log could not be read: {exc.args[0].str()}") from None
    finally:
        consumer.close()


def kafka_line(msg: Any) -> dict[str, Any]:
    """One record as printed, as ``line`` prints an entry."""
    partition, at = msg.partition(), msg.offset()
    offset = f"{partition}:{position(at)}"
    try:
        e = decode_record(partition, at, msg.key() or b"", msg.value() or b"", msg.headers(),
                          msg.timestamp()[1])  # fmt: skip
        return {"offset": offset, "type": e.type, "key": e.key, "time": e.time_ms,
                "payload": orjson.loads(e.payload_json)}  # fmt: skip
    except ValueError:
        raw = {k: (v or b"").decode(errors="replace") for k, v in msg.headers() or ()}
        raw["key"] = (msg.key() or b"").decode(errors="replace")
        raw["value"] = (msg.value() or b"").decode(errors="replace")
        return {"offset": offset, "type": raw.get("type"), "key": raw["key"], "time": None,
                "payload": None, "raw": raw}  # fmt: skip
