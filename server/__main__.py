"""``python -m server``: serve the gateway with uvicorn and uvloop until stopped."""

from __future__ import annotations

import logging
import sys

import uvicorn

from server.app import create_app
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
        ws="websockets-sansio",
        ws_max_size=settings.max_body_bytes,
        lifespan="on",
        timeout_graceful_shutdown=5,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
