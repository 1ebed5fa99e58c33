"""Liveviews' subscription gateway: publish events, read views, and follow them live.

``python -m liveviews.gateway`` serves it; ``create_app(settings)`` builds the ASGI application.
"""

from __future__ import annotations

from liveviews.gateway.app import create_app
from liveviews.gateway.errors import GatewayError
from liveviews.gateway.settings import GatewaySettings

__all__ = ["GatewayError", "GatewaySettings", "create_app"]
