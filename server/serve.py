"""Serving: uvicorn's settings for the gateway, and ``LV_WORKERS`` processes on one port.

The worker processes are started with ``spawn`` and find ``serve_worker`` here, in a module
they can import (a package's ``__main__`` is not re-imported by ``multiprocessing``).
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import os
import resource
import signal
import socket
from typing import Any

import uvicorn

from liveviews import console
from liveviews.gateway import redact
from liveviews.gateway._uvicorn import WebSocketProtocol, check, http_protocol
from liveviews.gateway.app import create_app
from liveviews.gateway.settings import GatewaySettings


def raise_open_files() -> None:
    """Each connection is a file: allow as many as the hard limit does."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def config(settings: GatewaySettings, app: Any, **overrides: Any) -> uvicorn.Config:
    """uvicorn's settings for serving the gateway ``app``; ``overrides`` replace any of them.
    Raises ``IncompatibleServer`` if the installed uvicorn lacks what the takeover uses."""
    check()
    options: dict[str, Any] = dict(
        host=settings.host,
        port=settings.port,
        loop="uvloop",
        http=http_protocol(
            settings.header_timeout_seconds,
            settings.send_timeout_seconds,
            settings.body_timeout_seconds,
        ),
        ws=WebSocketProtocol,
        ws_max_size=settings.max_body_bytes,
        # permessage-deflate keeps a compressor and a decompressor per socket for its whole
        # life (~38 KB an idle socket here, offered by every browser): opt-in, as SSE is.
        ws_per_message_deflate=settings.ws_compression,
        # A socket that does not answer a ping within the send timeout is closed: a peer that
        # vanished without FIN or RST would otherwise hold it until its token expires.
        ws_ping_interval=settings.heartbeat_seconds,
        ws_ping_timeout=settings.send_timeout_seconds,
        lifespan="on",
        # uvicorn's lines go through the process's own logging (liveviews.console), and
        # a line per request would bury the console.
        log_config=None,
        access_log=False,
        timeout_graceful_shutdown=5,
        backlog=4096,
    )
    server_config = uvicorn.Config(app, **{**options, **overrides})
    # After uvicorn has set its loggers up: no line of theirs or ours shows a token.
    redact.install()
    return server_config


def serve_worker() -> None:
    """One of ``LV_WORKERS`` processes: its own app and change feed, a shared port."""
    raise_open_files()
    settings = GatewaySettings.from_env()
    console.setup("gateway", settings.store)
    sock = socket.socket(socket.AF_INET6 if ":" in settings.host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((settings.host, settings.port))
    sock.set_inheritable(True)
    uvicorn.Server(config(settings, create_app(settings))).run(sockets=[sock])


def supervise(workers: int) -> int:
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=serve_worker, name=f"liveviews-{i}") for i in range(workers)]
    for p in procs:
        p.start()

    def stop_all(*_: object) -> None:
        for p in procs:
            if p.is_alive() and p.pid is not None:
                os.kill(p.pid, signal.SIGTERM)

    signal.signal(signal.SIGTERM, stop_all)
    signal.signal(signal.SIGINT, stop_all)
    sentinels = [p.sentinel for p in procs]
    multiprocessing.connection.wait(sentinels)
    stop_all()
    for p in procs:
        p.join()
    return max((p.exitcode or 0) for p in procs)
