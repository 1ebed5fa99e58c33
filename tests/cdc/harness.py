"""Helpers of the change data capture tests: the CDC process, the log read back, and the
tables recomputed from it to compare with the database's."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import orjson
import psycopg2
import redis

from liveviews.app import App
from liveviews.log.events import log_stream
from liveviews.tables import OLD_KEY, Table

PARTITIONS = 4
SHARDS = 8
"""The root conftest's store layout."""
ROOT = Path(__file__).resolve().parents[2]


def execute(dsn: str, *statements: str | tuple[str, tuple[Any, ...]]) -> None:
    """Run ``statements`` in one transaction."""
    conn = psycopg2.connect(dsn)
    try:
        with conn, conn.cursor() as cur:
            for statement in statements:
                if isinstance(statement, tuple):
                    cur.execute(*statement)
                else:
                    cur.execute(statement)
    finally:
        conn.close()


class CdcProcess:
    """``python -m liveviews.cdc`` for a test: its output in a file, killed at the end."""

    def __init__(self, store_url: str, dsn: str, data_dir: Path, app: str, **env: str) -> None:
        self.env = {
            **os.environ,
            "REDIS_URL": store_url,
            "DATABASE_URL": dsn,
            "LV_APP": app,
            "LV_DATA_DIR": str(data_dir),
            "LV_LOG_PARTITIONS": str(PARTITIONS),
            "LV_CHANGE_SHARDS": str(SHARDS),
            **env,
        }
        data_dir.mkdir(parents=True, exist_ok=True)
        self.output = data_dir / "cdc.out"
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> CdcProcess:
        with open(self.output, "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "liveviews.cdc"], env=self.env, cwd=ROOT,
                stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip
        self.starts += 1
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        if self.alive():
            assert self.proc is not None
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def wait(self, timeout: float) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout)

    def text(self) -> str:
        return self.output.read_text(errors="replace")


def logged(store: redis.Redis) -> list[dict[str, Any]]:
    """Every log entry, partition by partition, in log order."""
    out = []
    for p in range(PARTITIONS):
        for entry_id, fields in store.xrange(log_stream(p)):
            out.append({
                "partition": p,
                "id": entry_id.decode(),
                "type": fields[b"type"].decode(),
                "key": fields[b"key"].decode(),
                "time": int(fields[b"time"]),
                "payload": orjson.loads(fields[b"payload"]),
                "tx": fields.get(b"tx", b"").decode() or None,
                "tx_events": int(fields[b"tx_events"]) if b"tx_events" in fields else None,
            })  # fmt: skip
    return out


def kafka_logged(bootstrap: str, topic: str) -> list[dict[str, Any]]:
    """Every committed record of a Kafka log, partition by partition, in log order, as
    ``logged`` reads entries."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    from liveviews.log.kafka.records import header, position

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "tests-cdc",
                         "isolation.level": "read_committed", "enable.partition.eof": True})  # fmt: skip
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    got: list[list[dict[str, Any]]] = [[] for _ in range(PARTITIONS)]
    at_end: set[int] = set()
    deadline = time.monotonic() + 30
    try:
        while len(at_end) < PARTITIONS:
            assert time.monotonic() < deadline, "the Kafka log was not read to its end in 30 s"
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            p, error = msg.partition(), msg.error()
            assert p is not None
            if error is not None:
                assert error.code() == KafkaError._PARTITION_EOF, error
                at_end.add(p)
                continue
            at_end.discard(p)
            headers = msg.headers()
            tx, tx_events = header(headers, "tx"), header(headers, "tx_events")
            got[p].append({
                "partition": p,
                "id": position(msg.offset() or 0),
                "type": (header(headers, "type") or b"").decode(),
                "key": (msg.key() or b"").decode(),
                "time": int(header(headers, "time") or 0),
                "payload": orjson.loads(msg.value() or b"null"),
                "tx": tx.decode() if tx else None,
                "tx_events": int(tx_events) if tx_events else None,
            })  # fmt: skip
    finally:
        consumer.close()
    return [e for part in got for e in part]


def recompute(events: list[dict[str, Any]], app: App) -> dict[str, dict[tuple[Any, ...], Any]]:
    """Each declared table, by key, from applying its events in log order per partition."""
    tables: dict[str, dict[tuple[Any, ...], Any]] = {name: {} for name in app.tables}
    for e in events:
        name, _, operation = e["type"].rpartition("_")
        table = app.tables[name]
        rows, payload = tables[name], dict(e["payload"])
        old = payload.pop(OLD_KEY, None)
        if old is not None:
            rows.pop(tuple(old[c] for c in table.key), None)
        if operation in ("insert", "update"):
            rows[tuple(payload[c] for c in table.key)] = payload
    return tables


def table_rows(dsn: str, table: Table) -> dict[tuple[Any, ...], Any]:
    """The table as the database holds it, in the events' JSON (numeric as text)."""
    conn = psycopg2.connect(dsn)
    try:
        with conn.cursor() as cur:
            cur.execute(f"SELECT {', '.join(table.columns)} FROM {table.qualified}")
            rows = {}
            for record in cur.fetchall():
                row = {
                    c: str(v) if isinstance(v, Decimal) else v
                    for c, v in zip(table.columns, record, strict=True)
                }
                rows[tuple(row[c] for c in table.key)] = row
            return rows
    finally:
        conn.close()


def tx_counts(events: list[dict[str, Any]]) -> Counter[str]:
    return Counter(e["tx"] for e in events if e["tx"] is not None)


def wait_for(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.1)
