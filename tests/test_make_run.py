"""The whole system as ``make run`` starts it (the Procfile under honcho), fed bad events.

An event that no view can render, entries another producer wrote straight into the log, and
the pipeline killed outright: the gateway keeps serving all along, later events still reach
the views, and the bad ones are listed as dead letters.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis

from liveviews.log import deadletters
from liveviews.log.events import MAX_EVENT_TIME_MS, log_stream, partition_for
from liveviews.pipeline.settings import Settings

REPO = Path(__file__).resolve().parent.parent


def _free_ports(n: int) -> list[int]:
    """``n`` distinct TCP ports nothing listens on: each socket stays bound until all are
    chosen, or the kernel may hand one port out twice (the store and PostgreSQL then collide)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


class System:
    """``make run``'s script (scripts/run.sh) with its own data directory and ports."""

    def __init__(self, data_dir: Path, **env: str) -> None:
        self.port, store_port, postgres_port = _free_ports(3)
        self.env = {
            **os.environ,
            "PATH": f"{REPO / '.venv' / 'bin'}:{os.environ['PATH']}",
            "PYSPARK_PYTHON": sys.executable,
            "LV_DATA_DIR": str(data_dir),
            "LV_PORT": str(self.port),
            "LV_EMBEDDED_PORT": str(store_port),
            "LV_POSTGRES_PORT": str(postgres_port),
            "LV_WAIT_FOR_STORE": "30",
            "LV_DEMO_ACTIVITY": "0",
            **env,
        }
        # As a user runs it: LV_REALTIME too (the suite's micro-batches, tests/conftest.py).
        for name in ("REDIS_URL", "DATABASE_URL", "LV_ENV", "LV_JWT_SECRET", "LV_REALTIME"):
            self.env.pop(name, None)
        self.url = f"http://127.0.0.1:{self.port}"
        self.token = ""
        self.proc = subprocess.Popen(
            ["bash", str(REPO / "scripts" / "run.sh")],
            cwd=REPO, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip

    def store(self) -> redis.Redis:
        return redis.Redis.from_url(Settings.from_env(self.env).store_url)

    def request(self, path: str, body: object = None) -> tuple[int, Any]:
        """(status, JSON body) of a GET, or of a POST of ``body``."""
        headers = {"Content-Type": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        data = None if body is None else orjson.dumps(body)
        req = urllib.request.Request(self.url + path, data=data, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                return resp.status, orjson.loads(resp.read() or b"null")
        except urllib.error.HTTPError as exc:
            return exc.code, orjson.loads(exc.read() or b"null")

    def rows(self, view: str, key: str) -> dict[str, Any]:
        status, body = self.request(f"/v1/views/{view}/{key}")
        return body["rows"] if status == 200 else {}

    def wait(self, what: str, ok: Callable[[], object], timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, "make run stopped"
            try:
                if ok():
                    return
            except (redis.RedisError, OSError):
                pass
            time.sleep(0.25)
        raise AssertionError(f"{what}: not within {timeout} s")

    def stop(self) -> str:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            out, _ = self.proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            out, _ = self.proc.communicate()
        return out.decode(errors="replace")


def _tweet(user: str, suffix: str, text: str = "hello") -> dict[str, object]:
    return {"type": "tweet_posted", "payload": {"user": user, "tweet": f"{user}:{suffix}",
                                                "text": text}}  # fmt: skip


def _pipeline_pid(root: int) -> int | None:
    """The ``python -m liveviews.pipeline`` process that ``make run`` (process ``root``) started."""
    out = subprocess.run(["ps", "-eo", "pid=,ppid=,args="], capture_output=True, text=True)
    parent, args = {}, {}
    for line in out.stdout.splitlines():
        fields = line.split(None, 2)
        if len(fields) == 3:
            parent[int(fields[0])], args[int(fields[0])] = int(fields[1]), fields[2]
    for pid, cmd in args.items():
        if cmd.endswith("-m liveviews.pipeline") and "supervise" not in cmd:
            up = pid
            while up > 1:
                up = parent.get(up, 0)
                if up == root:
                    return pid
    return None


@pytest.mark.timeout(600)
def test_make_run_keeps_serving_through_bad_events_and_a_killed_pipeline(tmp_path):
    system = System(tmp_path / "data")
    out = ""
    try:
        system.wait("the gateway", lambda: system.request("/readyz")[0] == 200)
        status, token = system.request("/v1/dev/token", {"user": "zed", "scope": "read publish"})
        system.token = token["token"]
        assert system.request("/v1/events", _tweet("zed", "first"))[0] == 202
        system.wait("the first tweet", lambda: system.rows("tweets", "zed:first"))

        # A far-future time is refused at the door; written straight into the log, it is
        # shown by the tweets view and left out of the activity counts (a watermark in year
        # 9999 would close every minute), an undecodable entry is set aside, and later events
        # still arrive.
        future = {**_tweet("zed", "future"), "time": "9999-12-31T23:59:59Z"}
        status, refused = system.request("/v1/events", future)
        assert status == 422, refused
        store = system.store()
        p = partition_for("zed", Settings.from_env(system.env).log_partitions)
        far = store.xadd(log_stream(p), {"type": "tweet_posted", "key": "zed",
                                         "time": MAX_EVENT_TIME_MS - 1,
                                         "payload": orjson.dumps(future["payload"])})  # fmt: skip
        junk = store.xadd(log_stream(p), {"type": "tweet_posted", "key": "zed", "time": "x"})
        assert system.request("/v1/events", _tweet("zed", "after"))[0] == 202
        system.wait("a tweet after the bad entries", lambda: system.rows("tweets", "zed:after"))
        junk_offset = f"{p}:{junk.decode()}"
        system.wait("the dead letters",
                    lambda: deadletters.show(store, "activity", junk_offset))  # fmt: skip
        assert deadletters.show(store, "entities", junk_offset) is not None
        assert system.rows("tweets", "zed:future")
        assert deadletters.show(store, "activity", f"{p}:{far.decode()}") is None

        # The pipeline killed outright is started again; the gateway serves all along.
        pid = _pipeline_pid(system.proc.pid)
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        assert system.rows("tweets", "zed:after")
        assert system.request("/v1/events", _tweet("zed", "later"))[0] == 202
        system.wait("a tweet after the restart", lambda: system.rows("tweets", "zed:later"))
        assert _pipeline_pid(system.proc.pid) not in (None, pid)
    finally:
        out = system.stop()
        print(out[-6000:])
    assert "pipeline exited with status" in out and "starting it again in 1 s" in out
    # Chirp declares no tables: no PostgreSQL, no change data capture.
    assert "postgres.1" not in out and "cdc.1" not in out


@pytest.mark.timeout(600)
def test_make_run_runs_the_shop_from_postgresql_to_its_views():
    """``LV_APP=demo.orders:app make run``: the embedded PostgreSQL, the CDC process and the
    shop's writer run beside the store, the pipeline and the gateway; the writer seeds the
    table, and a row changed with SQL reaches the views."""
    import psycopg2

    from liveviews.cdc.settings import CdcSettings

    # PostgreSQL, run as the 'postgres' user when the tests run as root, must reach its data:
    # not under pytest's temporary directory, which is its owner's only.
    data = Path(tempfile.mkdtemp(prefix="lv-make-run-"))
    data.chmod(0o711)
    system = System(data, LV_APP="demo.orders:app")
    out = ""
    try:
        system.wait("the gateway", lambda: system.request("/readyz")[0] == 200)
        status, token = system.request("/v1/dev/token", {"user": "viewer", "scope": "read"})
        system.token = token["token"]
        system.wait("the seeded orders", lambda: "1" in system.rows("orders_by_status", "open"))
        assert system.rows("orders", "ada").keys() == {"1", "2"}
        with psycopg2.connect(CdcSettings.from_env(system.env).url) as conn, conn.cursor() as cur:
            cur.execute("UPDATE orders SET status = 'shipped', total = 43.00 WHERE id = 1")
        conn.close()
        system.wait("the update", lambda: "1" in system.rows("orders_by_status", "shipped"))
        assert "1" not in system.rows("orders_by_status", "open")
        assert system.rows("orders", "ada")["1"] == {
            "id": 1, "customer": "ada", "status": "shipped", "total": "43.00"
        }  # fmt: skip
    finally:
        out = system.stop()
        print(out[-6000:])
        shutil.rmtree(data, ignore_errors=True)
    assert f"The shop's page: http://127.0.0.1:{system.port}/orders.html" in out
    assert "postgres.1 started" in out and "cdc.1 started" in out
