"""The JavaScript client's tests (client-js/test/), run by Node against a real gateway.

The gateway is a real uvicorn over the session's store, as in tests/server; a second one
serves the application of ``tests.support.queryapp``, whose views a client subscribes to by
query (a prefix, a window). The Node tests make changes happen exactly when they need them
through a small control server of this process, which writes deltas and frontier advances with
the real ``ChangeTopicSink`` (as the Spark pipeline does), wipes the store, or floods a shard
until its history is trimmed.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import redis

from demo.chirp import app as chirp
from liveviews.app import App
from liveviews.changes.cuts import CUTS_STREAM
from liveviews.changes.topic import shard_for
from liveviews.log.eventlog import EventLog
from liveviews.log.events import entry_id_tuple, log_stream
from tests.support.gateway import ServedGateway, Writer, free_port, stored_rows
from tests.support.gateway_settings import PARTITIONS, SHARDS, settings_for
from tests.support.queryapp import app as queryapp

ROOT = Path(__file__).resolve().parents[2]
NODE = shutil.which("node") or "/usr/bin/node"
NODE_TIMEOUT = int(os.environ.get("JS_TEST_TIMEOUT") or 300)
# JS_TEST_FILES narrows the run to some files while working on them.
TARGETS = (os.environ.get("JS_TEST_FILES") or "client-js/test/").split()


class Control:
    """What the Node tests may ask of the store; one lock, one batch counter for all writers."""

    def __init__(self, store_url: str) -> None:
        self.client = redis.Redis.from_url(store_url)
        self.lock = threading.Lock()
        self.batches = itertools.count(1)
        self.writer = self._writer(10_000)
        self.small = self._writer(10)
        self.queries = self._writer(10_000, queryapp)
        self.cuts_seen: dict[str, str] = {}
        """Per pipeline, the last cut it ended a batch at."""

    def _writer(self, retention: int, app: App = chirp) -> Writer:
        writer = Writer(self.client, app, SHARDS, retention=retention)
        writer.batches = self.batches  # batch ids must grow across writers, as in one pipeline
        return writer

    def write(self, body: dict[str, Any]) -> dict[str, Any]:
        """``app: "queries"`` writes the views of the query application, else Chirp's."""
        changes = [tuple(c) for c in body["changes"]]
        frontier = {int(p): o for p, o in (body.get("frontier") or {}).items()}
        writer = self.queries if body.get("app") == "queries" else self.writer
        writer.write(changes, frontier)  # type: ignore[arg-type]
        return {}

    def batch(self, body: dict[str, Any]) -> dict[str, Any]:
        """One micro-batch of one of Chirp's pipelines, as its source would end it: its changes
        (view, key, row, value), then its frontier at the log's heads after one more event, or
        with ``"at": "cut"`` at the gateway's next cut for a group (``liveviews.changes.cuts``),
        waited for. Answers the frontier."""
        if body.get("at") == "cut":
            frontier = self._next_cut(body["pipeline"], body.get("covering"))
        else:
            EventLog(self.client, chirp, PARTITIONS).append_batch(
                [{"type": "follow", "payload": {"user": "x", "followee": "y"}}])  # fmt: skip
            frontier = {p: heads[0][0].decode() if (heads := self.client.xrevrange(
                log_stream(p), count=1)) else "0-0" for p in range(PARTITIONS)}  # fmt: skip
        rows = [{"view": v, "key": k, "row": r, "value": None if val is None else json.dumps(val),
                 "score": 0.0} for v, k, r, val in body.get("changes", [])]  # fmt: skip
        self.writer.sinks[body["pipeline"]].write(rows, next(self.batches), frontier)
        return {"frontier": {str(p): at for p, at in frontier.items()}}

    def _next_cut(self, pipeline: str, covering: dict[str, Any] | None) -> dict[int, str]:
        """The newest cut ``pipeline`` has not ended a batch at yet; with ``covering`` (a
        frontier: partition -> entry id), the first one at or past it, waited for."""
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            seen = self.cuts_seen.get(pipeline, "0-0")
            read = self.client.xread({CUTS_STREAM: seen}, count=100, block=1_000)
            if not read:
                continue
            entry_id, fields = read[0][1][-1]  # the gateway waits for its newest only
            self.cuts_seen[pipeline] = entry_id.decode()
            cut = {int(p): at.decode() for p, at in fields.items() if p != b"pipelines"}
            if covering is None or all(entry_id_tuple(cut[int(p)]) >= entry_id_tuple(at)
                                       for p, at in covering.items()):  # fmt: skip
                return cut
        raise TimeoutError("the gateway appended no such cut within 10 s")

    def wipe(self, body: dict[str, Any]) -> dict[str, Any]:
        self.client.flushdb()
        self.cuts_seen = {}
        return {}

    def flood(self, body: dict[str, Any]) -> dict[str, Any]:
        """Changes of other keys on the shard of (view, key), until its history is trimmed."""
        view, key = body["view"], body["key"]
        shard = shard_for(view, key, SHARDS)
        others = (f"flood{i}" for i in itertools.count())
        neighbours = list(itertools.islice(
            (k for k in others if shard_for(view, k, SHARDS) == shard), 5
        ))  # fmt: skip
        for i in range(int(body.get("n", 100))):
            self.small.write([(view, neighbours[i % 5], "profile", {"name": f"n{i}"})])
        return {}

    def rows(self, body: dict[str, Any]) -> dict[str, Any]:
        return {"rows": stored_rows(self.client, body["view"], body["key"], SHARDS)}

    def handle(self, action: str, body: dict[str, Any]) -> dict[str, Any]:
        handler = {"write": self.write, "wipe": self.wipe, "flood": self.flood,
                   "rows": self.rows, "batch": self.batch}.get(action)  # fmt: skip
        if handler is None:
            raise KeyError(action)
        with self.lock:
            return handler(body)


def serve_control(control: Control) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (the name http.server calls)
            length = int(self.headers.get("Content-Length") or 0)
            try:
                body = json.loads(self.rfile.read(length) or b"{}")
                answer, status = control.handle(self.path.strip("/"), body), 200
            except Exception as exc:  # reported to the Node test that asked
                answer, status = {"error": repr(exc)}, 500
            data = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture(scope="module")
def gateway(store_url: str) -> Iterator[ServedGateway]:
    served = ServedGateway(settings_for(store_url, LV_MAX_SUBSCRIPTIONS_PER_SOCKET="20")).start()
    yield served
    served.stop()


@pytest.fixture(scope="module")
def query_gateway(store_url: str) -> Iterator[ServedGateway]:
    served = ServedGateway(
        settings_for(
            store_url, LV_APP="tests.support.queryapp:app", LV_MAX_SUBSCRIPTIONS_PER_SOCKET="20"
        )
    ).start()
    yield served
    served.stop()


def node_major() -> int:
    version = subprocess.run([NODE, "--version"], capture_output=True, text=True).stdout
    return int(version.strip().lstrip("v").split(".")[0] or 0)


def test_the_javascript_client(
    gateway: ServedGateway, query_gateway: ServedGateway, store: redis.Redis, store_url: str
) -> None:
    """``node --test client-js/test/``: every test passes, none is skipped."""
    if node_major() < 20:
        pytest.fail(f"the JavaScript client's tests need Node 20 or newer; {NODE} is older")
    control = serve_control(Control(store_url))
    env = {
        **os.environ,
        "LV_GATEWAY_URL": gateway.url,
        "LV_QUERY_GATEWAY_URL": query_gateway.url,
        "LV_CONTROL_URL": f"http://127.0.0.1:{control.server_address[1]}",
        "LV_JWT_SECRET": gateway.settings.jwt_secret,
        "LV_JWT_AUDIENCE": gateway.settings.jwt_audience,
    }
    try:
        result = subprocess.run(
            [NODE, "--experimental-websocket", "--test", "--test-reporter=tap",
             "--test-concurrency=1", "--test-timeout=60000", *TARGETS],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=NODE_TIMEOUT,
        )  # fmt: skip
    finally:
        control.shutdown()
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"node --test failed:\n{output}"
    assert "# fail 0" in output and "# skipped 0" in output, output
    print(output[output.rfind("# tests") :])
