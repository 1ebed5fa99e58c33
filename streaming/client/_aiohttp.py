"""aiohttp, which the client runs on, named plainly when it is missing: the ``liveviews``
package does not require it (a gateway or a pipeline host has no use for it)."""

from __future__ import annotations

try:
    import aiohttp
except ImportError:
    raise ImportError(
        "liveviews.client runs on aiohttp, which is not installed: "
        "pip install 'liveviews[client]' (or aiohttp)"
    ) from None

__all__ = ["aiohttp"]
