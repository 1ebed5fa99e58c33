"""Static files: the demo web app at ``/`` and the JavaScript client at ``/client-js/``.

Starlette's ``StaticFiles`` resolves every path inside its directory and refuses anything that
would leave it (``..``, encoded or not, and symlinks pointing out), so no file outside the two
directories can be read. API paths (``/v1/...``) are never matched here, so a wrong method on an
endpoint still answers 405 and an unknown endpoint the JSON 404 of docs/PROTOCOL.md.
"""

from __future__ import annotations

import os
from pathlib import Path

from starlette.datastructures import URLPath
from starlette.responses import Response
from starlette.routing import BaseRoute, Match, NoMatchFound
from starlette.staticfiles import StaticFiles
from starlette.types import Receive, Scope, Send

API_PREFIX = "/v1/"
CLIENT_PREFIX = "/client-js"


class _Files(StaticFiles):
    """Static files revalidated on every load, so an edited module is never served stale."""

    def file_response(
        self,
        full_path: str | os.PathLike[str],
        stat_result: os.stat_result,
        scope: Scope,
        status_code: int = 200,
    ) -> Response:
        response = super().file_response(full_path, stat_result, scope, status_code)
        response.headers["Cache-Control"] = "no-cache"
        response.headers["X-Content-Type-Options"] = "nosniff"
        return response


class StaticRoute(BaseRoute):
    """Serves ``directory`` under ``prefix`` for GET and HEAD; never matches API paths."""

    def __init__(self, prefix: str, directory: Path) -> None:
        self.prefix = prefix.rstrip("/")
        self.files = _Files(directory=directory, html=True)

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        if scope["type"] != "http":
            return Match.NONE, {}
        path: str = scope["path"]
        if path == API_PREFIX.rstrip("/") or path.startswith(API_PREFIX):
            return Match.NONE, {}
        if self.prefix and path != self.prefix and not path.startswith(self.prefix + "/"):
            return Match.NONE, {}
        if not self.prefix and (path == CLIENT_PREFIX or path.startswith(CLIENT_PREFIX + "/")):
            return Match.NONE, {}
        # StaticFiles serves the path relative to root_path, as under a Mount.
        root = scope.get("root_path", "")
        return Match.FULL, {"root_path": root + self.prefix}

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.files(scope, receive, send)

    def url_path_for(self, name: str, /, **path_params: object) -> URLPath:
        raise NoMatchFound(name, dict(path_params))


def static_routes(web_dir: Path | None, client_dir: Path | None) -> list[BaseRoute]:
    """The routes for the directories that exist; a missing one is simply not served."""
    out: list[BaseRoute] = []
    if client_dir is not None and client_dir.is_dir():
        out.append(StaticRoute(CLIENT_PREFIX, client_dir))
    if web_dir is not None and web_dir.is_dir():
        out.append(StaticRoute("", web_dir))
    return out
