"""``python -m server``: serve the gateway with uvicorn and uvloop until stopped."""

from __future__ import annotations

import logging
import sys

import uvicorn

from server.app import create_app
from server.edge import http_protocol
from server.settings import GatewaySettings
from streaming.errors import LiveviewsError


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    try:
        settings = GatewaySettings.from_env()
        app = create_app(settings)
    except LiveviewsError as exc:
        print(f"liveviews: {exc.message}", file=sys.stderr)
        return 2
    if settings.dev:
        logging.getLogger("liveviews.gateway").warning(
            "dev mode: tokens are signed with the public dev secret%s",
            " and /v1/dev/token hands them out" if settings.dev_tokens else "",
        )
    uvicorn.run(
        app,
        host=settings.host,
        port=settings.port,
        loop="uvloop",
        http=http_protocol(settings.header_timeout_seconds, settings.send_timeout_seconds),
        ws="websockets-sansio",
        ws_max_size=settings.max_body_bytes,
        # A socket that does not answer a ping within the send timeout is closed: a peer that
        # vanished without FIN or RST would otherwise hold it until its token expires.
        ws_ping_interval=settings.heartbeat_seconds,
        ws_ping_timeout=settings.send_timeout_seconds,
        lifespan="on",
        timeout_graceful_shutdown=5,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
