"""The operators' HTTP endpoint: ``GET /v1/operator/views/{view}/{key}?as_of=<partition>:<id>``,
a key's rows as they were when its view reflected a log offset (``liveviews.changes.asof``): the
same document as ``liveviews inspect --json --as-of``.

It reads any key of any view, so it is not open to the application's users: it answers only
with ``LV_OPERATOR_TOKEN`` set, to a request that sends that token as ``Authorization: Bearer``.
Without the setting the gateway answers as if there were no such endpoint.
"""

from __future__ import annotations

import hmac
import threading

import redis
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from liveviews.changes import asof
from liveviews.errors import LiveviewsError
from liveviews.gateway.api.params import single, single_header, view_and_key, whole_number
from liveviews.gateway.api.responses import json_response
from liveviews.gateway.errors import BadRequest, GatewayError, NotFound, Unauthorized
from liveviews.gateway.gateway import Gateway

TOKEN_VARIABLE = "LV_OPERATOR_TOKEN"
MAX_DELTAS = 1000


class HistoryGone(GatewayError):
    status = 410
    code = "history_gone"


class NotReflected(GatewayError):
    status = 409
    code = "not_reflected"


_clients: dict[str, redis.Redis] = {}
_clients_lock = threading.Lock()


def _client(url: str) -> redis.Redis:
    """One synchronous client per store for this process: the as-of read is synchronous (the
    command line shares it) and runs in a worker thread, off the event loop."""
    with _clients_lock:
        if url not in _clients:
            _clients[url] = redis.Redis.from_url(url, socket_connect_timeout=5, socket_timeout=10)
        return _clients[url]


def check_operator(request: Request) -> None:
    gw: Gateway = request.app.state.gateway
    expected = gw.settings.operator_token
    if expected is None:
        raise NotFound(f"there is no endpoint at {request.url.path}; see /openapi.json.")
    header = single_header(request, "authorization", "token_invalid") or ""
    scheme, _, given = header.partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(
        given.strip().encode(), expected.encode()
    ):
        raise Unauthorized(f"send the operator token ({TOKEN_VARIABLE}) as Authorization: Bearer.")


async def view_as_of(request: Request) -> Response:
    check_operator(request)
    gw: Gateway = request.app.state.gateway
    view, key = view_and_key(request)
    if not key or len(key) > 256:
        raise NotFound("a view key is 1 to 256 characters long.", code="invalid_key")
    raw = single(request, "as_of")
    if raw is None:
        raise BadRequest(
            "send as_of=<partition>:<entry id>, an offset as POST /v1/events answers it.",
            code="invalid_offset",
        )
    count_raw = single(request, "deltas")
    count = 10 if count_raw is None else whole_number(count_raw, MAX_DELTAS)
    if count is None:
        raise BadRequest(
            f"deltas must be a number from 0 to {MAX_DELTAS}.", code="invalid_parameter"
        )
    try:
        offset = asof.parse_offset(raw, gw.layout.partitions)
        client = _client(gw.settings.store.store_url)
        found = await run_in_threadpool(
            asof.rows_as_of, client, gw.app, gw.layout.shards, view, key, offset
        )
    except asof.HistoryGone as exc:
        raise HistoryGone(exc.message) from None
    except asof.NotReflected as exc:
        raise NotReflected(exc.message) from None
    except asof.UnknownView as exc:
        raise NotFound(exc.message, code=exc.code) from None
    except LiveviewsError as exc:  # a malformed offset
        raise BadRequest(exc.message, code=exc.code) from None
    return json_response(found.to_dict(count), 200, {"Cache-Control": "no-store"})
