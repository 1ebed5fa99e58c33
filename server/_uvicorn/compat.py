"""What the gateway takes from uvicorn's and websockets' internals, checked by name.

The connection takeover (``liveviews.gateway._uvicorn``) reads and sets attributes that are no part
of either library's public API. An upgrade that renames one would otherwise show up as an
``AttributeError`` deep in a live connection, or worse as a stream that silently falls back to
the slower path. ``missing()`` names every such attribute the installed versions lack, and
``check()`` refuses to serve with a sentence that says which one and what to install.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from functools import cache
from importlib import metadata
from typing import Any

from uvicorn import Server
from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from websockets.protocol import Protocol as WebSocketsProtocol
from websockets.streams import StreamReader

TESTED = {"uvicorn": ">=0.54,<0.55", "websockets": ">=17,<18"}
"""The versions the takeover is tested with; pyproject.toml pins the same ranges."""

REQUIRED: list[tuple[type[Any], tuple[str, ...]]] = [
    (HttpToolsProtocol, (
        "cycle", "pipeline", "connections", "flow", "parser", "loop", "transport",
        "connection_made", "connection_lost", "handle_websocket_upgrade", "on_headers_complete",
        "on_response_complete",
    )),
    (RequestResponseCycle, (
        "send", "transport", "response_started", "response_complete", "chunked_encoding",
        "disconnected",
    )),
    (FlowControl, ("resume_reading",)),
    (WebSocketsSansIOProtocol, (
        "conn", "handshake_complete", "close_sent", "disconnected", "initial_response",
        "transport", "frames", "queue", "connections", "stop_keepalive",
    )),
    (WebSocketsProtocol, ("parser", "parser_exc", "extensions")),
    (StreamReader, ("at_eof",)),
    (Server, ("should_exit", "handle_exit")),
]  # fmt: skip
"""Each class the boundary reaches into, and the attributes or methods it uses of it."""


def _assigned(cls: type[Any]) -> set[str]:
    """The names ``self.<name> = ...`` assigns in the methods of ``cls`` and its bases."""
    names: set[str] = set()
    for klass in inspect.getmro(cls):
        if klass is object:
            continue
        names |= _assigned_in(klass)
    return names


@cache
def _assigned_in(klass: type[Any]) -> set[str]:
    try:
        source = textwrap.dedent(inspect.getsource(klass))
    except (OSError, TypeError):
        return set()
    names = set()
    for node in ast.walk(ast.parse(source)):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, ast.AnnAssign | ast.AugAssign):
            targets = [node.target]
        for target in targets:
            for t in ast.walk(target):
                if (isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name)
                        and t.value.id == "self"):  # fmt: skip
                    names.add(t.attr)
    return names


def missing(required: list[tuple[type[Any], tuple[str, ...]]] = REQUIRED) -> list[str]:
    """``module.Class.attribute`` for each required attribute that the class neither defines
    nor assigns on its instances."""
    out = []
    for cls, attributes in required:
        assigned = _assigned(cls)
        for name in attributes:
            if not hasattr(cls, name) and name not in assigned:
                out.append(f"{cls.__module__}.{cls.__qualname__}.{name}")
    return out


def installed() -> dict[str, str]:
    out = {}
    for name in TESTED:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


class IncompatibleServer(RuntimeError):
    """The installed uvicorn or websockets lacks what the connection takeover uses."""


def check(required: list[tuple[type[Any], tuple[str, ...]]] = REQUIRED) -> None:
    """Raise ``IncompatibleServer`` naming each attribute the installed versions lack."""
    gone = missing(required)
    if not gone:
        return
    versions = ", ".join(f"{k} {v}" for k, v in installed().items())
    tested = ", ".join(f"{k}{v}" for k, v in TESTED.items())
    raise IncompatibleServer(
        f"the gateway's connection takeover (server/_uvicorn/) needs {', '.join(gone)}, which "
        f"the installed {versions} lack{'s' if len(gone) == 1 else ''}; install the tested "
        f"versions ({tested}), or adapt server/_uvicorn/ to the new ones."
    )
