"""``make run-cluster`` (scripts/run-cluster.sh): Chirp on a Spark standalone cluster, two
gateways behind nginx, the log in Kafka on three brokers, the store and the demo's writer, all
as the script starts them.

SSE subscribers and the demo's page in Chromium read through nginx while events are
published through it; one gateway process, then one Spark worker, then one Kafka broker and,
while it is down, the pipeline's driver are killed outright. The gateway's supervisor starts it
again and the subscribers resume on the other one; Spark runs the lost tasks on the remaining
worker; the two other brokers go on acknowledging appends (``acks=all``, two in sync) until the
killed one is started again, and the pipeline started again resumes from its checkpoint. Every subscriber must see each later event, with no gap,
no duplicate and no reset, and end with the stored rows; the page, never reloaded, shows each
later name.
"""

from __future__ import annotations

import contextlib
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
import psutil
import pytest
import redis
from playwright.sync_api import Page, expect, sync_playwright
from redis.exceptions import RedisClusterException

from liveviews.pipeline.settings import Settings
from liveviews.store.client import Client, connect
from liveviews.store.cluster import free_port_range
from tests.faults.clients import ClientLoop, Resumer, dev_token, sse_subscriber
from tests.support.browser import CHROMIUM, CHROMIUM_ARGS
from tests.support.gateway import stored_rows

REPO = Path(__file__).resolve().parents[2]
USERS = ["ann", "bob", "cy"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ClusterRun:
    """scripts/run-cluster.sh with a data directory and ports of its own."""

    def __init__(self, data: Path) -> None:
        self.data = data
        ports = {name: str(_free_port()) for name in (
            "LV_PORT", "LV_GATEWAY1_PORT", "LV_GATEWAY2_PORT", "LV_SPARK_PORT",
            "LV_SPARK_UI_PORT")}  # fmt: skip
        # The store cluster's six nodes and their cluster bus, from its first node's port; then
        # the three Kafka brokers and their controllers.
        base = free_port_range(18)
        ports["LV_EMBEDDED_PORT"], ports["LV_KAFKA_PORT"] = str(base), str(base + 12)
        self.env = {**os.environ, "PATH": f"{REPO / '.venv' / 'bin'}:{os.environ['PATH']}",
                    "PYSPARK_PYTHON": sys.executable, "LV_DATA_DIR": str(data),
                    "LV_DEMO_ACTIVITY": "0", **ports}  # fmt: skip
        for name in ("REDIS_URL", "LV_ENV", "LV_JWT_SECRET", "LV_APP", "SPARK_MASTER", "LV_KAFKA"):
            self.env.pop(name, None)
        self.url = f"http://127.0.0.1:{ports['LV_PORT']}"
        self.gateway_ports = [ports["LV_GATEWAY1_PORT"], ports["LV_GATEWAY2_PORT"]]
        self.log = open(data.parent / "run-cluster.out", "wb")  # noqa: SIM115 - closed in stop
        self.proc = subprocess.Popen(
            ["bash", str(REPO / "scripts" / "run-cluster.sh")], cwd=REPO, env=self.env,
            stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip

    def store(self) -> Client:
        return connect(Settings.from_env(self.env).store_url)

    def post(self, path: str, body: object, token: str = "") -> tuple[int, Any]:
        headers = {"Content-Type": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        req = urllib.request.Request(self.url + path, data=orjson.dumps(body), headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                return resp.status, orjson.loads(resp.read() or b"null")
        except urllib.error.HTTPError as exc:  # nginx's own 502 is a page, not JSON
            raw = exc.read()
            return exc.code, orjson.loads(raw) if raw.startswith(b"{") else raw.decode()

    def wait(self, what: str, ok: Callable[[], object], timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"run-cluster stopped:\n{self.output()}"
            try:
                if ok():
                    return
            except (OSError, redis.RedisError, RedisClusterException):
                pass  # a store cluster still forming, or the run stopping: asked again
            time.sleep(0.25)
        raise AssertionError(f"{what}: not within {timeout} s\n{self.output()}")

    def processes(self, match: Callable[[list[str]], bool]) -> list[psutil.Process]:
        found = []
        for p in psutil.process_iter(["cmdline", "environ"]):
            try:
                cmd = p.info["cmdline"] or []
                if match(cmd) and (p.info["environ"] or {}).get("LV_DATA_DIR") == str(self.data):
                    found.append(p)
            except (psutil.Error, TypeError):
                continue
        return found

    def output(self) -> str:
        self.log.flush()
        return (self.data.parent / "run-cluster.out").read_text(errors="replace")[-6000:]

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.log.close()
        # Nothing of the run may outlive it (the Spark processes lead groups of their own).
        time.sleep(1)
        left = self.processes(lambda cmd: True)
        for p in left:
            p.kill()
        assert not left, f"left running after the run stopped: {[p.cmdline() for p in left]}"


def _gateway(cmd: list[str]) -> bool:
    return cmd[-2:] == ["-m", "liveviews.gateway"] and "liveviews.supervise" not in cmd


def _signed_in(page: Page, url: str, user: str) -> None:
    """Chirp's page, signed in as ``user`` (a handle of the dev mode's sign-in form)."""
    page.goto(url + "/")
    page.get_by_test_id("signin-handle").fill(user)
    page.get_by_test_id("signin-handle").press("Enter")
    expect(page.get_by_test_id("connection-state")).to_have_attribute("data-state", "connected")


@pytest.mark.timeout(900)
def test_make_run_cluster_serves_through_killed_gateway_worker_broker_and_driver() -> None:
    data = Path(tempfile.mkdtemp(prefix="lv-run-cluster-")) / "data"
    data.mkdir()
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: apt-get install chromium (make test does)")
    playwright = sync_playwright().start()
    browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True,
                                         args=CHROMIUM_ARGS)  # fmt: skip
    page = browser.new_page()
    name = page.get_by_test_id("profile-name")
    run = ClusterRun(data)  # from here on, stopped in the end whatever happens
    clients = ClientLoop()
    subs = [Resumer(f"sse-{u}", "profiles", u) for u in USERS]
    token = dev_token("watcher")
    shards = Settings.from_env(run.env).change_shards
    renamed = 0

    def rename_all() -> None:
        nonlocal renamed
        renamed += 1
        for u in USERS:
            event = {"type": "profile_set", "payload": {"user": u, "name": f"{u}-{renamed}"}}
            for _ in range(20):
                status, body = run.post("/v1/events", event, dev_token(u))
                # nginx does not send a POST that reached a gateway again (it may have been
                # appended): a publish on its kept connection to the killed gateway gets 502,
                # and the client tries again, as docs/SCALING.md says clients do.
                if status not in (502, 503):
                    break
                time.sleep(0.2)
            assert status == 202, body

    def all_show_the_last() -> bool:
        return all(s.state.rows.get("profile", {}).get("name") == f"{s.key}-{renamed}"
                   for s in subs)  # fmt: skip

    stored: dict[str, Any] = {}
    try:
        run.wait("nginx and a gateway", lambda: urllib.request.urlopen(run.url + "/readyz",
                                                                      timeout=2).status == 200)  # fmt: skip
        # The demo seeds Chirp's users (bob among them) once the log answers: a rename appended
        # before its seed would be overwritten by it, so the seed comes first.
        run.wait("the demo's seed in the views", lambda: stored_rows(
            run.store(), "profiles", "alice", shards).get("profile"))  # fmt: skip
        rename_all()
        run.wait("the pipeline on the cluster", lambda: all(
            stored_rows(run.store(), "profiles", u, shards).get("profile", {}).get("name")
            == f"{u}-{renamed}" for u in USERS))  # fmt: skip
        for s in subs:
            clients.spawn(sse_subscriber(run.url, token, s, clients.halt))
        run.wait("every subscriber's snapshot", all_show_the_last, 60)
        _signed_in(page, run.url, USERS[0])
        expect(name).to_have_text(f"{USERS[0]}-{renamed}", timeout=60_000)

        gateways = run.processes(_gateway)
        assert len(gateways) == 2, [g.cmdline() for g in gateways]
        gateways[0].kill()
        for _ in range(3):
            rename_all()
        run.wait("the renames after a gateway was killed", all_show_the_last, 90)
        expect(name).to_have_text(f"{USERS[0]}-{renamed}", timeout=60_000)
        run.wait("the gateway started again",
                 lambda: len(run.processes(_gateway)) == 2)  # fmt: skip

        workers = run.processes(lambda cmd: "org.apache.spark.deploy.worker.Worker" in cmd)
        assert len(workers) == 2, [w.cmdline()[-6:] for w in workers]
        for child in workers[0].children(recursive=True):
            child.kill()  # its executor goes with it, as with a lost machine
        workers[0].kill()
        for _ in range(3):
            rename_all()
        run.wait("the renames after a worker was killed", all_show_the_last, 180)
        expect(name).to_have_text(f"{USERS[0]}-{renamed}", timeout=60_000)

        brokers = run.processes(lambda cmd: "kafka.Kafka" in cmd)
        assert len(brokers) == 3, [b.cmdline()[-2:] for b in brokers]
        brokers[0].kill()
        drivers = run.processes(lambda cmd: cmd[-2:] == ["-m", "liveviews.pipeline"]
                                and "liveviews.supervise" not in cmd)  # fmt: skip
        assert len(drivers) == 1, [d.cmdline() for d in drivers]
        drivers[0].kill()  # while a broker is down: it resumes from its checkpoint
        for _ in range(3):
            rename_all()
        run.wait("the renames after a broker and the driver were killed", all_show_the_last, 240)
        expect(name).to_have_text(f"{USERS[0]}-{renamed}", timeout=60_000)
        run.wait("the broker started again",
                 lambda: len(run.processes(lambda cmd: "kafka.Kafka" in cmd)) == 3)  # fmt: skip
        expect(page.get_by_test_id("connection-state")).to_have_attribute("data-state",
                                                                         "connected")  # fmt: skip
        stored = {u: stored_rows(run.store(), "profiles", u, shards) for u in USERS}
    finally:
        # The run is stopped whatever else fails here: left running, it would take the
        # machine's cores from every test after it.
        with contextlib.ExitStack() as cleanup:
            cleanup.callback(shutil.rmtree, data.parent, ignore_errors=True)
            cleanup.callback(run.stop)
            cleanup.callback(clients.stop)
            cleanup.callback(playwright.stop)
            cleanup.callback(browser.close)
    for s in subs:
        assert s.failure is None, f"{s.name}: {s.failure}"
        assert s.state.resets == 0, f"{s.name} was reset"
        assert s.connects >= 1
        assert s.state.rows == stored[s.key], s.name
    assert sum(s.connects for s in subs) > len(subs), "no subscriber was on the killed gateway"
