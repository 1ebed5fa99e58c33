"""What each gateway process reports about itself, for ``liveviews status``.

Every gateway process writes one field of the ``lv:gateways`` hash every few seconds:
``<host>:<pid>`` -> JSON ``{"at": <unix seconds>, "connections": n, "subscribers": {view: n}}``,
``at`` by the store's clock.
A field not refreshed for ``STALE_SECONDS`` is a gateway that stopped; readers leave it out and
any gateway may delete it.
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass
from typing import Any

import orjson

from liveviews.log.eventlog import store_time_ms
from liveviews.store.client import Client

GATEWAYS_KEY = "lv:gateways"
REPORT_SECONDS = 5.0
STALE_SECONDS = 30.0


@dataclass(frozen=True)
class GatewayReport:
    name: str
    at: float
    connections: int
    subscribers: dict[str, int]


def own_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def encode(connections: int, subscribers: dict[str, int], now: float | None = None) -> bytes:
    return orjson.dumps(
        {
            "at": time.time() if now is None else now,
            "connections": connections,
            "subscribers": subscribers,
        }  # fmt: skip
    )


def decode(name: str, raw: bytes) -> GatewayReport:
    data = orjson.loads(raw)
    return GatewayReport(
        name, float(data["at"]), int(data["connections"]), dict(data["subscribers"])
    )


def read_gateways(client: Client, now: float | None = None) -> list[GatewayReport]:
    """The gateways that reported within ``STALE_SECONDS``, by name."""
    # The store's clock, on which the gateways write their reports (``Presence.report``).
    now = store_time_ms(client) / 1000 if now is None else now
    raw: Any = client.hgetall(GATEWAYS_KEY)
    reports = []
    for k, v in raw.items():
        try:
            reports.append(decode(k.decode(), v))
        except (ValueError, KeyError, TypeError):  # not a report: left for the gateways to prune
            continue
    return sorted((r for r in reports if now - r.at <= STALE_SECONDS), key=lambda r: r.name)
