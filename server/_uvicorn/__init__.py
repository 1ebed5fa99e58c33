"""The one private boundary to uvicorn's and websockets' internals.

The gateway serves on uvicorn (httptools, uvloop) and, for its long-lived responses, takes
each connection over from uvicorn once the response has started: an idle SSE stream or
WebSocket then holds no task and none of uvicorn's per-connection state, and each delivery is a
system call on the socket (the figures are in docs/PERFORMANCE.md). That needs uvicorn's and
websockets' private internals; every use of them is in this subpackage, and nothing outside
it imports uvicorn's protocols:

- ``http``: uvicorn's httptools protocol with a header timeout, a bounded close, and the
  takeover of a started chunked response (``LingeringTransport.release``);
- ``websocket``: uvicorn's sans-I/O WebSocket protocol whose open socket can be taken over;
- ``compat``: the attributes all this uses, checked by name against the installed versions
  (pinned in pyproject.toml to the tested range), so that an upgrade that breaks the takeover
  stops the gateway with a sentence naming what is missing.

Under any other server (or a connection that cannot be taken over) the senders fall back to
plain ASGI (``liveviews.gateway.live.sse``, ``liveviews.gateway.live.sockets.AsgiSocket``).
"""

from __future__ import annotations

import signal
from typing import Any

from starlette.types import Scope

from liveviews.gateway._uvicorn.compat import TESTED, IncompatibleServer, check
from liveviews.gateway._uvicorn.http import Owner, http_protocol
from liveviews.gateway._uvicorn.websocket import Build, WebSocketProtocol

__all__ = [
    "SERVER_SEND",
    "TESTED",
    "Build",
    "IncompatibleServer",
    "Owner",
    "WebSocketProtocol",
    "check",
    "http_protocol",
    "response_transport",
    "serving_server",
    "websocket_protocol",
]

SERVER_SEND = "liveviews.server_send"
"""The scope key under which the application keeps the server's own ``send``
(``liveviews.gateway.app``): every middleware wraps ``send``, and the takeover needs the
server's."""

_HTTPTOOLS = "uvicorn.protocols.http.httptools_impl"


def response_transport(scope: Scope) -> Any | None:
    """The transport of a started response, once uvicorn's httptools protocol has chosen
    chunked encoding for it; None under any other server."""
    cycle = getattr(scope.get(SERVER_SEND), "__self__", None)
    if type(cycle).__module__ != _HTTPTOOLS:
        return None
    if not getattr(cycle, "chunked_encoding", False):
        return None
    return getattr(cycle, "transport", None)


def websocket_protocol(scope: Scope) -> WebSocketProtocol | None:
    """The gateway's WebSocket protocol serving ``scope``'s socket, if uvicorn serves it."""
    protocol = getattr(scope.get(SERVER_SEND), "__self__", None)
    return protocol if isinstance(protocol, WebSocketProtocol) else None


def serving_server() -> Any | None:
    """The uvicorn server that serves this process, found as sse-starlette finds it.

    uvicorn installs its bound ``handle_exit`` as the SIGTERM handler while it serves (from the
    main thread only); its ``should_exit`` turns true when a graceful shutdown begins.
    """
    server = getattr(signal.getsignal(signal.SIGTERM), "__self__", None)
    return server if hasattr(server, "should_exit") else None
