"""``create_app(settings)``: the gateway as one ASGI application."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from redis.exceptions import RedisClusterException, RedisError
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route, WebSocketRoute
from starlette.types import Receive, Scope, Send

from liveviews.app import App
from liveviews.errors import StoreMismatch
from liveviews.gateway._uvicorn import SERVER_SEND
from liveviews.gateway.api import operator, rest, sessions, streams
from liveviews.gateway.api.cors import GatewayCORS
from liveviews.gateway.api.responses import HELD, Rest, json_response
from liveviews.gateway.api.static import static_routes
from liveviews.gateway.errors import INTERNAL_MESSAGE, GatewayError, TooManyRequests, Unavailable
from liveviews.gateway.gateway import Gateway
from liveviews.gateway.settings import GatewaySettings

log = logging.getLogger("liveviews.gateway")

HTTP_CODES = {404: "not_found", 405: "method_not_allowed"}


def routes(dev_tokens: bool, log_feed: bool = True) -> list[BaseRoute]:
    """The API's routes; static files (``liveviews.gateway.api.static``) come after them."""
    out: list[BaseRoute] = [
        Route("/v1/events", rest.post_events, methods=["POST"]),
        # A key may hold a '/' (written %2F), which the routes, matching the decoded path, see
        # as any other: the stream's route comes first, and each reads the raw path.
        Route("/v1/views/{view}/{key:keypath}/live", streams.live, methods=["GET"]),
        Route("/v1/views/{view}/{key:keypath}", rest.get_view, methods=["GET"]),
        Route("/v1/live", streams.query_live, methods=["GET"]),
        Route("/v1/groups/live", streams.group_live, methods=["GET"]),
        Route("/v1/streams/{stream}/wait", streams.stream_wait, methods=["POST"]),
        WebSocketRoute("/v1/ws", sessions.socket),
        Route("/healthz", rest.healthz, methods=["GET"]),
        Route("/readyz", rest.readyz, methods=["GET"]),
        Route("/metrics", rest.metrics, methods=["GET"]),
        Route("/openapi.json", rest.openapi, methods=["GET"]),
    ]
    if dev_tokens:
        out.append(Route("/v1/dev/token", rest.dev_token, methods=["POST"]))
    if log_feed:
        out.append(Route("/v1/log/live", streams.log_live, methods=["GET"]))
    return out


async def _gateway_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, GatewayError)
    headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
    if isinstance(exc, TooManyRequests):
        headers = {"Retry-After": str(exc.retry_after)}
    return json_response(exc.to_dict(), exc.status, headers)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    code = HTTP_CODES.get(exc.status_code, "http_error")
    message = {
        404: f"there is no endpoint at {request.url.path}; see /openapi.json.",
        405: f"{request.method} is not allowed here; see /openapi.json.",
    }.get(exc.status_code, str(exc.detail))
    return json_response({"code": code, "message": message}, exc.status_code, exc.headers)


async def _store_error(request: Request, exc: Exception) -> Response:
    log.warning("store error on %s: %s", request.url.path, exc)
    if isinstance(exc, StoreMismatch):
        err = Unavailable(exc.message, code="store_mismatch")
    else:
        err = Unavailable("the store is unreachable; try again shortly.", code="store_unavailable")
    return await _gateway_error(request, err)


async def _internal_error(request: Request, exc: Exception) -> Response:
    log.error("unhandled error on %s", request.url.path, exc_info=exc)
    return json_response({"code": "internal_error", "message": INTERNAL_MESSAGE}, 500)


class GatewayApp(Starlette):
    """The Starlette application, which also keeps the server's own ``send`` in the scope, and
    runs the rest of a started SSE stream or WebSocket once Starlette has returned.

    SSE streams write straight to the connection under uvicorn (``liveviews.gateway.live``); every
    middleware wraps ``send``, so the server's is taken here, before any of them. A stream's
    head goes out through the middleware (CORS adds its headers there), as does a WebSocket's
    accept; the rest of their life, which for most is waiting, is held here, in one small
    coroutine, rather than under Starlette's stack of middleware, routing and exception
    wrappers (``liveviews.gateway.api.responses.hand_over``).
    """

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        scope[SERVER_SEND] = send
        if scope["type"] == "lifespan":
            await super().__call__(scope, receive, send)
            return
        held: list[Rest] = []
        scope[HELD] = held
        try:
            await super().__call__(scope, receive, send)
            if held:
                await held.pop()(receive, send)
        finally:
            # The server's ``send`` is bound to the request's cycle, which holds this scope:
            # a reference cycle that would keep both until the garbage collector's next pass.
            del scope[SERVER_SEND]


def create_app(settings: GatewaySettings, app: App | None = None) -> Starlette:
    """The gateway for ``settings``; ``app`` overrides the application ``LV_APP`` names."""
    gateway = Gateway(settings, app)

    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        await gateway.start()
        try:
            yield
        finally:
            await gateway.stop()

    middleware = []
    if settings.cors_origins:
        middleware.append(
            Middleware(
                GatewayCORS,
                allow_origins=list(settings.cors_origins),
                allow_credentials=True,
                allow_methods=["GET", "POST", "OPTIONS"],
                allow_headers=[
                    "Authorization",
                    "Content-Type",
                    "Last-Event-ID",
                    "If-None-Match",
                    "Idempotency-Key",
                ],
                expose_headers=["ETag"],
            )
        )
    starlette = GatewayApp(
        routes=[
            *routes(settings.dev_tokens, settings.log_feed),
            Route("/v1/operator/views/{view}/{key:keypath}", operator.view_as_of, methods=["GET"]),
            *static_routes(settings.static_dir, settings.client_js_dir),
        ],
        middleware=middleware,
        lifespan=lifespan,
        exception_handlers={
            GatewayError: _gateway_error,
            HTTPException: _http_error,
            RedisError: _store_error,
            RedisClusterException: _store_error,
            ConnectionError: _store_error,
            StoreMismatch: _store_error,
            Exception: _internal_error,
        },
    )
    # A path that matches no route answers 404 in the API's JSON, not a redirect to the same
    # path without its last slash: a view key never holds a slash, and the fuzzing of the
    # OpenAPI document found /v1/views/{view}/{key}%2F answered 307.
    starlette.router.redirect_slashes = False
    starlette.state.gateway = gateway
    return starlette
