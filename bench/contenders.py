"""The servers a fan-out benchmark compares, each started fresh, and how each is published to.

- ``liveviews``: ``python -m liveviews.gateway`` (one process, or ``LV_WORKERS`` processes on one
port);
- ``nchan``: nginx with the nchan module, an SSE pub/sub hub in C, published to by HTTP POST;
- ``naive``: ``bench/baselines/naive_gateway.py``, one ``XREAD BLOCK`` per subscriber.

The gateways are published to through the real sink (``ChangeTopicSink``), one micro-batch per
message with a frontier advance, as the pipeline writes; nchan gets the same message body.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import psutil
import redis

from bench.common import free_port, raise_open_files, token, wait_listening
from bench.loadclient import marker
from demo.chirp import app as chirp
from liveviews.pipeline.sink import ChangeTopicSink

ROOT = Path(__file__).resolve().parents[1]
BASELINES = Path(__file__).resolve().parent / "baselines"
SHARDS = 16
VIEW = "likes"
NCHAN_MODULE = Path("/usr/lib/nginx/modules/ngx_nchan_module.so")


def cpu_seconds(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        with contextlib.suppress(psutil.NoSuchProcess):
            t = psutil.Process(pid).cpu_times()
            total += t.user + t.system
    return total


def rss_bytes(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        with contextlib.suppress(psutil.NoSuchProcess):
            total += psutil.Process(pid).memory_info().rss
    return total


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            for child in psutil.Process(proc.pid).children(recursive=True):
                child.kill()
            proc.kill()
            proc.wait()


@dataclass
class Server:
    """A started contender: where to connect, what to ask, whose CPU and memory to count."""

    name: str
    port: int
    proc: subprocess.Popen[bytes]
    path: str  # the subscriber's request path, with ``{key}``
    headers: dict[str, str] = field(default_factory=dict)

    def pids(self) -> list[int]:
        try:
            children = psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []
        return [self.proc.pid, *(c.pid for c in children)]

    def request(self, key: str) -> bytes:
        lines = [f"GET {self.path.format(key=key)} HTTP/1.1", f"Host: 127.0.0.1:{self.port}",
                 "Accept: text/event-stream",
                 *(f"{k}: {v}" for k, v in self.headers.items())]  # fmt: skip
        return ("\r\n".join(lines) + "\r\n\r\n").encode()


@contextlib.contextmanager
def _python_server(
    name: str, port: int, args: list[str], env: dict[str, str],
    headers: dict[str, str] | None = None,
) -> Iterator[Server]:  # fmt: skip
    """``python <args>`` serving SSE subscribers on ``port``, stopped on exit."""
    proc = subprocess.Popen([sys.executable, *args], cwd=ROOT, env={**os.environ, **env},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        wait_listening(port, proc)
        yield Server(name, port, proc, f"/v1/views/{VIEW}/{{key}}/live", headers or {})
    finally:
        stop(proc)


def liveviews(store_url: str, workers: int = 1, extra: dict[str, str] | None = None,
              name: str | None = None) -> contextlib.AbstractContextManager[Server]:  # fmt: skip
    port = free_port()
    env = {"REDIS_URL": store_url, "LV_PORT": str(port), "LV_CHANGE_SHARDS": str(SHARDS),
           "LV_MAX_CONNECTIONS": "20000", "LV_LOG_FEED": "false", "LV_WORKERS": str(workers),
           # The load comes from one user on one address: no per-subject or per-address cap.
           "LV_MAX_CONNECTIONS_PER_SUBJECT": "0", "LV_MAX_CONNECTIONS_PER_ADDRESS": "0",
           **(extra or {})}  # fmt: skip
    name = name or ("liveviews" if workers == 1 else f"liveviews x{workers}")
    auth = {"Authorization": f"Bearer {token(scope='read')}"}
    return _python_server(name, port, ["-m", "liveviews.gateway"], env, auth)


def idle_asgi() -> contextlib.AbstractContextManager[Server]:
    """``bench/baselines/idle_asgi.py`` under the gateway's own uvicorn settings."""
    port = free_port()
    code = ("from liveviews.gateway.settings import GatewaySettings; "
            "from liveviews.gateway.serve import config, raise_open_files; import uvicorn; "
            "from bench.baselines.idle_asgi import app; "
            "raise_open_files(); s = GatewaySettings.from_env(); "
            "uvicorn.Server(config(s, app)).run()")  # fmt: skip
    return _python_server("bare uvicorn", port, ["-c", code], {"LV_PORT": str(port)})


def naive(store_url: str) -> contextlib.AbstractContextManager[Server]:
    port = free_port()
    code = ("import resource; s, h = resource.getrlimit(resource.RLIMIT_NOFILE); "
            "resource.setrlimit(resource.RLIMIT_NOFILE, (h, h)); import uvicorn; "
            f"uvicorn.run('bench.baselines.naive_gateway:app', port={port}, "
            "log_level='warning', backlog=4096)")  # fmt: skip
    env = {"REDIS_URL": store_url, "LV_CHANGE_SHARDS": str(SHARDS)}
    return _python_server("naive", port, ["-c", code], env)


def nchan_installed() -> bool:
    return NCHAN_MODULE.exists() and shutil.which("nginx") is not None


def ensure_nchan() -> bool:
    """Install nginx and nchan with ``bench/setup.sh`` if missing; True if they are there."""
    if not nchan_installed():
        subprocess.run(["bash", str(Path(__file__).parent / "setup.sh")], check=False)
    return nchan_installed()


@contextlib.contextmanager
def nchan() -> Iterator[Server]:
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="lv-nchan-") as prefix:
        conf = (BASELINES / "nchan.conf.template").read_text()
        conf = conf.replace("{module}", str(NCHAN_MODULE)).replace("{port}", str(port))
        conf = conf.replace("{prefix}", prefix)
        (Path(prefix) / "nginx.conf").write_text(conf)
        os.chmod(prefix, 0o755)
        proc = subprocess.Popen(
            ["nginx", "-p", prefix, "-c", f"{prefix}/nginx.conf", "-e", f"{prefix}/error.log"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            wait_listening(port, proc)
            yield Server("nginx+nchan", port, proc, "/sub?id={key}")
        finally:
            stop(proc)


class SinkPublisher:
    """Writes each message as one micro-batch through the real sink, with a frontier advance."""

    def __init__(self, store_url: str) -> None:
        self.client = redis.Redis.from_url(store_url)
        # Through the sink of the pipeline that writes VIEW: its subscribers follow its frontier.
        self.sink = ChangeTopicSink(self.client, chirp, chirp.owner_of(VIEW) or "", SHARDS, 10_000)
        self.batch = int(time.time() * 1000)  # batch ids stay new across contenders

    def publish(self, keys: list[str]) -> None:
        self.batch += 1
        rows: list[dict[str, Any]] = [
            {"view": VIEW, "key": k, "row": "m", "score": 0.0,
             "value": orjson.dumps({"m": marker(time.time())}).decode()}
            for k in keys
        ]  # fmt: skip
        self.sink.write(rows, self.batch, {0: f"{self.batch}-0"})

    def close(self) -> None:
        self.client.close()


class NchanPublisher:
    """POSTs each message to nchan's publisher location, one request per channel."""

    def __init__(self, port: int) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)

    def publish(self, keys: list[str]) -> None:
        for k in keys:
            body = orjson.dumps({"m": marker(time.time())})
            self.conn.request("POST", f"/pub?id={k}", body, {"Content-Type": "application/json"})
            self.conn.getresponse().read()

    def close(self) -> None:
        self.conn.close()


def store_env() -> None:
    """The store inherits the harness's limit of open files: raise it before starting one."""
    raise_open_files()
