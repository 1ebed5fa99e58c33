"""A view's code changes: the new version is rebuilt beside the serving one, through kills.

An application module on disk is the "code" (``notes_app.py``: a count of each user's notes
and the last one's text). It is changed to upper-case the text, which is a new version, and
the pipeline is started again: the old version keeps serving subscribers (SSE and WebSocket
clients of a real gateway) and keeps up with new notes, while the new version is built from the
start of the log. The pipeline is killed in the middle of the rebuild, and again just after
readers were switched. Every subscriber must end on the new version, having been reset once
with ``view_replaced``, never shown a row of one version among rows of the other, with rows
equal to a recomputation from the log; the old version's state is then deleted.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis

from liveviews.changes.topic import ACTIVE_KEY, read_snapshot
from liveviews.log.eventlog import EventLog
from liveviews.pipeline import versions
from liveviews.pipeline.settings import MAX_NICENESS
from tests.faults.clients import (
    ClientLoop,
    Resumer,
    dev_token,
    sse_subscriber,
    ws_subscriber,
)
from tests.faults.harness import (
    PARTITIONS,
    ROOT,
    SHARDS,
    Gateway,
    Pipeline,
    wait_caught_up,
)
from tests.support.gateway import Event, free_port
from tests.support.processes import builders, cmdline, descendants, spark_jvm

APP = '''
"""Notes: each user's count of notes and the last one's text."""
import orjson
from pyspark.sql.streaming.stateful_processor import StatefulProcessor
from pyspark.sql.types import LongType, StructField, StructType

from liveviews import App, Schema, String, log_order
from liveviews.pipeline.views import CHANGE_SCHEMA, Changes

app = App("notes")
app.event_type("note", Schema({{"user": String(), "text": String()}}), lambda p: p["user"])
app.view("notes")


def shown(text):
    return {shown}


class Notes(StatefulProcessor):
    def init(self, handle):
        self.count = handle.getValueState("count", StructType([StructField("n", LongType())]))

    def handleInputRows(self, key, rows, timerValues):
        stored = self.count.get()
        n = stored[0] if stored else 0
        changes = Changes()
        for row in sorted(rows, key=lambda r: log_order(r["offset"])):
            n += 1
            text = shown(orjson.loads(row["payload"])["text"])
            changes.upsert("notes", key[0], "count", {{"n": n, "last": text}})
        self.count.update((n,))
        return iter(changes.rows())

    def close(self):
        pass


@app.pipeline("notes", views=["notes"])
def notes(events):
    return (
        events.select("partition", "offset", "key", "payload")
        .groupBy("key")
        .transformWithState(Notes(), CHANGE_SCHEMA, "Update", "None")
    )
'''
OLD, NEW = "text", "text.upper()"
USERS = [f"u{i}" for i in range(12)]


def _load(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location("notes_app_in_test", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.app


def _notes(n: int, start: int) -> list[dict[str, Any]]:
    return [
        {
            "type": "note",
            "payload": {"user": USERS[i % len(USERS)], "text": f"note{i}"},
            "time": 1_700_000_000_000 + i,
        }  # fmt: skip
        for i in range(start, start + n)
    ]


def _expected(client: redis.Redis, upper: bool) -> dict[str, dict[str, Any]]:
    """Each user's row, recomputed from the log."""
    counts: dict[str, dict[str, Any]] = {}
    for p in range(PARTITIONS):
        for _, fields in client.xrange(f"lv:log:{p}"):
            payload = orjson.loads(fields[b"payload"])
            text = payload["text"].upper() if upper else payload["text"]
            row = counts.setdefault(payload["user"], {"n": 0, "last": ""})
            row["n"] += 1
            row["last"] = text
    return {u: {"count": r} for u, r in counts.items()}


class Recorder(Resumer):
    """A subscription that also keeps the reset codes and every row value it was shown."""

    def __init__(self, name: str, key: str) -> None:
        super().__init__(name, "notes", key)
        self.codes: list[str] = []
        self.mixed: list[str] = []

    def apply(self, ev: Event) -> None:
        super().apply(ev)
        if ev.event == "reset":  # the rows it shows are replaced by the snapshot that follows
            self.codes.append(ev.data["code"])
            return
        lasts = [v["last"] for v in self.state.rows.values()]
        replaced = "view_replaced" in self.codes
        for last in lasts:
            # Before the switch every text is as written; after it, every one upper-cased.
            if (last != last.lower()) != replaced and last.lower() != last.upper():
                self.mixed.append(f"{ev.event} after {self.codes}: {last}")


def _wait(what: str, predicate: Any, pipeline: Pipeline | None, timeout: float = 240) -> None:
    """Wait until ``predicate``; ``pipeline``, if given, must run meanwhile."""
    deadline = time.monotonic() + timeout
    while not predicate():
        tail = pipeline.tail() if pipeline else ""
        assert pipeline is None or pipeline.alive(), f"the pipeline exited:\n{tail}"
        assert time.monotonic() < deadline, f"{what} within {timeout} s\n{tail}"
        time.sleep(0.05)


@pytest.mark.timeout(600)
def test_a_changed_view_is_rebuilt_beside_the_old_one_through_kills(store, store_url, tmp_path):
    code = tmp_path / "app"
    code.mkdir()
    module = code / "notes_app.py"
    module.write_text(APP.format(shown=OLD))
    env = {
        "LV_APP": "notes_app:app",
        "PYTHONPATH": os.pathsep.join([str(code), str(ROOT)]),
        "LV_REBUILD_GRACE_SECONDS": "3",
        "LV_REBUILD_SWITCH_DISTANCE": "20",
    }
    pipeline = Pipeline(store_url, tmp_path)
    pipeline.env.update(env, LV_MAX_EVENTS_PER_BATCH="250")
    log = EventLog(store, _load(module), PARTITIONS)
    log.append_batch(_notes(3000, 0))
    gateway = Gateway(store_url, tmp_path, free_port(), **env)
    clients = ClientLoop()
    token = dev_token("alice")
    sse = [Recorder(f"sse-{u}", u) for u in USERS[:3]]
    ws = [Recorder(f"ws-{u}", u) for u in USERS[3:6]]
    written = 3000
    try:
        pipeline.start()
        wait_caught_up(store, pipeline)
        gateway.start()
        for r in sse:
            clients.spawn(sse_subscriber(gateway.url, token, r, clients.halt))
        clients.spawn(ws_subscriber(gateway.url, token, ws, clients.halt))
        _wait("every subscriber has its snapshot", lambda: all(r.state.last_id for r in sse + ws),
              pipeline)  # fmt: skip
        old_id = sse[0].state.last_id
        pipeline.stop()

        module.write_text(APP.format(shown=NEW))  # the view's code changes: a new version
        pipeline.start()
        _wait("the rebuild starts", lambda: (r := versions.read(store, "notes")) is not None
              and r.next is not None and store.exists(f"lv:{{m}}:history:notes{r.next.namespace}"),
              pipeline)  # fmt: skip
        reg = versions.read(store, "notes")
        assert reg is not None and reg.next is not None and reg.active is not None
        assert reg.active.namespace == "" and reg.next.namespace == f"@{reg.next.version}"
        # Built in a process of its own, whose driver and Python workers run at the lowest
        # priority, in the kernel's idle class.
        (builder,) = builders(pipeline.pid())
        assert f"notes{reg.next.namespace}".encode() in cmdline(builder)
        base = os.getpriority(os.PRIO_PROCESS, pipeline.pid())
        for pid in [builder, spark_jvm(builder), *descendants(builder)]:
            with contextlib.suppress(ProcessLookupError):  # a launcher that has ended since
                assert os.getpriority(os.PRIO_PROCESS, pid) == MAX_NICENESS, cmdline(pid)
                assert os.sched_getscheduler(pid) == os.SCHED_IDLE, cmdline(pid)
        assert os.getpriority(os.PRIO_PROCESS, pipeline.jvm()) == base < MAX_NICENESS
        assert os.sched_getscheduler(pipeline.jvm()) == os.SCHED_OTHER
        log.append_batch(_notes(50, written))  # the old version keeps up meanwhile
        written += 50
        _wait("the old version takes new notes",
              lambda: read_snapshot(store, "notes", USERS[0], SHARDS).rows["count"]["n"]
              == sum(1 for i in range(written) if i % len(USERS) == 0), pipeline)  # fmt: skip
        assert store.hget(ACTIVE_KEY, "notes") is None, "switched before the rebuild was killed"
        assert pipeline.kill_jvm()  # killed in the middle of the rebuild
        _wait("the builder ends with the pipeline process", lambda: not cmdline(builder),
              pipeline=None, timeout=30)  # fmt: skip

        pipeline.start()  # resumes the rebuild from its checkpoint
        _wait("the rebuild resumes apart", lambda: builders(pipeline.pid()), pipeline)
        (resumed,) = builders(pipeline.pid())
        os.kill(resumed, signal.SIGKILL)  # the builder alone dies: the pipeline starts another
        _wait("readers are switched", lambda: store.hget(ACTIVE_KEY, "notes") is not None,
              pipeline)  # fmt: skip
        assert "exited with status -9; starting it again" in pipeline.tail(400)
        # The pipeline process runs the version it switched to: its builder handed it over.
        assert not builders(pipeline.pid())
        assert pipeline.kill_jvm()  # killed right after the switch, before the old one stopped
        log.append_batch(_notes(40, written))
        written += 40
        pipeline.start()
        wait_caught_up(store, pipeline)
        expected = _expected(store, upper=True)
        namespace = store.hget(ACTIVE_KEY, "notes").decode()
        assert namespace == reg.next.namespace
        for u in USERS:
            assert read_snapshot(store, "notes", u, SHARDS, namespace).rows == expected[u]
        _wait(
            "every subscriber shows the new version",
            lambda: all(r.state.rows == expected[r.key] for r in sse + ws),
            pipeline,
            60,
        )
        for r in sse + ws:
            assert r.failure is None, (r.name, r.failure)
            assert r.codes == ["view_replaced"], (r.name, r.codes)
            assert not r.mixed, (r.name, r.mixed[:3])

        # An id of the replaced version resumes with that reset and the new snapshot.
        resumed = _resume(gateway.url, token, USERS[0], old_id)
        assert [e["event"] for e in resumed[:2]] == ["reset", "snapshot"]
        assert resumed[0]["data"]["code"] == "view_replaced"
        assert resumed[1]["data"]["rows"] == expected[USERS[0]]

        # After the grace period the old version's state is gone; the new one's is whole.
        _wait("the old version's state is deleted",
              lambda: not list(store.scan_iter(match="lv:{c*}:rows:notes/*"))
              and not (versions.read(store, "notes") or reg).retired, pipeline, 60)  # fmt: skip
        assert not (tmp_path / "checkpoints" / "notes").exists()
        assert (tmp_path / "checkpoints" / f"notes{namespace}").exists()
    finally:
        clients.stop()
        gateway.stop()
        pipeline.stop()


@pytest.mark.timeout(300)
def test_an_operator_aborts_and_switches_a_version_being_built_apart(store, store_url, tmp_path):
    """``liveviews abort`` stops the process building the version; ``liveviews switch`` before
    its hand-over stops it too, and the pipeline process runs the version it switched to."""
    code = tmp_path / "app"
    code.mkdir()
    module = code / "notes_app.py"
    module.write_text(APP.format(shown=OLD))
    pipeline = Pipeline(store_url, tmp_path)
    pipeline.env.update(
        LV_APP="notes_app:app",
        PYTHONPATH=os.pathsep.join([str(code), str(ROOT)]),
        LV_REBUILD_SWITCH="manual",
        LV_MAX_EVENTS_PER_BATCH="100",
    )
    EventLog(store, _load(module), PARTITIONS).append_batch(_notes(3000, 0))
    try:
        pipeline.start()
        wait_caught_up(store, pipeline)

        versions.ask(store, "notes", "rebuild")
        _wait("the version is built apart", lambda: builders(pipeline.pid()), pipeline)
        (first,) = builders(pipeline.pid())
        versions.ask(store, "notes", "abort")
        _wait("the aborted version's process ends", lambda: not cmdline(first), pipeline, 60)
        # The pipeline process stops the builder, then drops the version from the registry.
        _wait("the version is dropped", lambda: (r := versions.read(store, "notes")) is not None
              and r.next is None, pipeline, 30)  # fmt: skip
        reg = versions.read(store, "notes")
        assert reg is not None and reg.next is None and reg.active is not None
        assert reg.active.namespace == ""

        versions.ask(store, "notes", "rebuild")
        _wait("the version is built apart again", lambda: builders(pipeline.pid()), pipeline)
        (second,) = builders(pipeline.pid())
        assert second != first
        versions.ask(store, "notes", "switch")  # long before it has caught up
        _wait("readers are switched", lambda: store.hget(ACTIVE_KEY, "notes") is not None,
              pipeline, 60)  # fmt: skip
        _wait("its process ends", lambda: not cmdline(second), pipeline, 60)
        namespace = store.hget(ACTIVE_KEY, "notes").decode()
        expected = _expected(store, upper=False)
        # Run on by the pipeline process itself, the switched version catches up.
        _wait("the switched version shows the whole log", lambda: all(
            read_snapshot(store, "notes", u, SHARDS, namespace).rows == expected[u]
            for u in USERS), pipeline, 120)  # fmt: skip
        assert not builders(pipeline.pid())
    finally:
        pipeline.stop()


def _resume(base: str, token: str, key: str, last_id: str | None) -> list[dict[str, Any]]:
    import urllib.request

    assert last_id is not None
    request = urllib.request.Request(
        f"{base}/v1/views/notes/{key}/live",
        headers={"Authorization": f"Bearer {token}", "Last-Event-ID": last_id},
    )
    events: list[dict[str, Any]] = []
    with urllib.request.urlopen(request, timeout=10) as answer:
        current: dict[str, Any] = {}
        for raw in answer:
            line = raw.decode().rstrip("\n")
            if line.startswith("event: "):
                current["event"] = line[7:]
            elif line.startswith("data: "):
                current["data"] = orjson.loads(line[6:])
            elif not line and current:
                events.append(current)
                current = {}
                if len(events) == 2:
                    break
    return events
