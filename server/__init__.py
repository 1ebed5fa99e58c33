"""Liveviews' subscription gateway: publish events, read views, and follow them live.

``python -m server`` serves it; ``create_app(settings)`` builds the ASGI application.
"""

from __future__ import annotations

from server.app import create_app
from server.errors import GatewayError
from server.settings import GatewaySettings

__all__ = ["GatewayError", "GatewaySettings", "create_app"]
