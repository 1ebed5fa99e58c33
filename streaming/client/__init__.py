"""A Python client of a Liveviews gateway (docs/CLIENT-PYTHON.md): follow views over one
WebSocket, or over Server-Sent Events where no WebSocket gets through, resumed with no gap and no
duplicate after a lost connection, and publish events once.

``liveviews.client.sync.connect(...)`` is the same client for scripts and notebooks, on an event
loop of its own. Nothing here imports Spark or the pipeline.
"""

from __future__ import annotations

from liveviews.client.client import Client
from liveviews.client.errors import (
    ClientStateError,
    ConnectionLost,
    GatewayError,
    LiveviewsClientError,
    ProtocolError,
)
from liveviews.client.group import Group, Member
from liveviews.client.query import Cursor
from liveviews.client.shapes import PrefixSubscription, Ranked, WindowSubscription
from liveviews.client.subscription import Change, Subscription, SubscriptionState
from liveviews.client.transport import ClientState
from liveviews.log.events import Offset

__all__ = [
    "Change",
    "Client",
    "ClientState",
    "ClientStateError",
    "ConnectionLost",
    "Cursor",
    "GatewayError",
    "Group",
    "LiveviewsClientError",
    "Member",
    "Offset",
    "PrefixSubscription",
    "ProtocolError",
    "Ranked",
    "Subscription",
    "SubscriptionState",
    "WindowSubscription",
]
