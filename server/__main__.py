"""``python -m liveviews.gateway``: serve the gateway with uvicorn (uvloop, httptools) until
stopped.

With ``LV_WORKERS=n`` (n > 1) it starts n gateway processes that share ``LV_PORT`` through
``SO_REUSEPORT``: the kernel spreads new connections over them, and each reads the change
topic once with its own change feed. This process only supervises them: it stops them all on
SIGTERM or Ctrl-C, and stops the rest when one exits.
"""

from __future__ import annotations

import logging
import socket
import sys

import uvicorn

from liveviews import console
from liveviews.errors import ConfigurationError, LiveviewsError
from liveviews.gateway._uvicorn import IncompatibleServer
from liveviews.gateway.app import create_app
from liveviews.gateway.serve import config, raise_open_files, supervise
from liveviews.gateway.settings import DEV_JWT_SECRET, GatewaySettings
from liveviews.store.embedded import wait_for_kafka, wait_for_store
from liveviews.store.password import redacted

log = logging.getLogger("liveviews.gateway")


def address(settings: GatewaySettings, port: int) -> str:
    """The gateway's address as a person on this machine opens it in a browser."""
    host = settings.host
    if host in ("0.0.0.0", "::"):
        host = "localhost"
    elif ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}/"


class Gateway(uvicorn.Server):
    """uvicorn's server, which says in one line once it listens, and where to go."""

    def __init__(self, config: uvicorn.Config, settings: GatewaySettings) -> None:
        super().__init__(config)
        self.settings = settings

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if not self.started:
            return
        # With LV_PORT=0 the system chose the port.
        port = self.settings.port or int(self.servers[0].sockets[0].getsockname()[1])
        url = address(self.settings, port)
        if self.settings.static_dir is None:
            log.info("ready: serving the API on %s", url)
        else:
            log.info("ready: open %s", url)


def main() -> int:
    raise_open_files()
    try:
        settings = GatewaySettings.from_env()
        console.setup("gateway", settings.store)
        log.info("starting on %s:%d%s; store at %s", settings.host, settings.port,
                 f" in {settings.workers} processes" if settings.workers > 1 else "",
                 redacted(settings.store.store_url))  # fmt: skip
        if settings.workers > 1 and settings.port == 0:
            raise ConfigurationError("LV_WORKERS > 1 needs a fixed LV_PORT, not 0.")
        # Under the run commands the store is a process of its own, maybe a cluster still
        # forming: the gateway learns whether it is a cluster once, so it waits for it first.
        wait_for_store(settings.store)
        wait_for_kafka(settings.store)
        app = create_app(settings) if settings.workers == 1 else None
    except LiveviewsError as exc:
        print(f"liveviews: {exc.message}", file=sys.stderr)
        return 2
    if settings.dev and settings.jwt_secret == DEV_JWT_SECRET:
        log.warning(
            "dev mode: tokens are signed with the public dev secret%s",
            " and /v1/dev/token hands them out" if settings.dev_tokens else "",
        )
    if app is None:
        return supervise(settings.workers)
    try:
        server_config = config(settings, app)
    except IncompatibleServer as exc:
        print(f"liveviews: {exc}", file=sys.stderr)
        return 2
    Gateway(server_config, settings).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
