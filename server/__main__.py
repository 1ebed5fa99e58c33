"""``python -m server``: serve the gateway with uvicorn (uvloop, httptools) until stopped.

With ``LV_WORKERS=n`` (n > 1) it starts n gateway processes that share ``LV_PORT`` through
``SO_REUSEPORT``: the kernel spreads new connections over them, and each reads the change
topic once with its own change feed. This process only supervises them: it stops them all on
SIGTERM or Ctrl-C, and stops the rest when one exits.
"""

from __future__ import annotations

import logging
import sys

import uvicorn

from server._uvicorn import IncompatibleServer
from server.app import create_app
from server.serve import config, raise_open_files, supervise
from server.settings import GatewaySettings
from streaming.core.errors import ConfigurationError, LiveviewsError

log = logging.getLogger("liveviews.gateway")


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    raise_open_files()
    try:
        settings = GatewaySettings.from_env()
        if settings.workers > 1 and settings.port == 0:
            raise ConfigurationError("LV_WORKERS > 1 needs a fixed LV_PORT, not 0.")
        app = create_app(settings) if settings.workers == 1 else None
    except LiveviewsError as exc:
        print(f"liveviews: {exc.message}", file=sys.stderr)
        return 2
    if settings.dev:
        log.warning(
            "dev mode: tokens are signed with the public dev secret%s",
            " and /v1/dev/token hands them out" if settings.dev_tokens else "",
        )
    if app is None:
        log.info("serving with %d processes on port %d", settings.workers, settings.port)
        return supervise(settings.workers)
    try:
        server_config = config(settings, app)
    except IncompatibleServer as exc:
        print(f"liveviews: {exc}", file=sys.stderr)
        return 2
    uvicorn.Server(server_config).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
