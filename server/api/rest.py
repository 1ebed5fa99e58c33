"""The plain HTTP endpoints: publish events, read a snapshot, dev tokens, health and metrics."""

from __future__ import annotations

import hashlib
import re
from typing import Any

import orjson
from redis.exceptions import RedisError
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response

from liveviews.gateway.api.openapi import document
from liveviews.gateway.api.params import single_header, view_and_key
from liveviews.gateway.api.publish import events_of, offset_dict, parse_body
from liveviews.gateway.api.responses import json_response, read_json
from liveviews.gateway.auth import ALL_SCOPES, COOKIE, PUBLISH, READ, authenticate
from liveviews.gateway.errors import BadRequest
from liveviews.gateway.feed.store import read_snapshot
from liveviews.gateway.gateway import Gateway
from liveviews.gateway.metrics import subscribers_by_view
from liveviews.gateway.wire.eventid import EventId
from liveviews.log import deadletters

DEV_USER_RE = re.compile(r"[A-Za-z0-9_.-]{1,64}")
DEV_SCOPE_RE = re.compile(r"(read|publish)( (read|publish))?")


def _gateway(request: Request) -> Gateway:
    gw: Gateway = request.app.state.gateway
    return gw


async def post_events(request: Request) -> Response:
    gw = _gateway(request)
    principal = await authenticate(request, gw.auth, PUBLISH)
    body = await read_json(request, gw.settings.max_body_bytes)
    raws = events_of(parse_body(body), gw.settings.max_batch_events)
    key = single_header(request, "Idempotency-Key", "invalid_idempotency_key")
    offsets = await gw.publisher.publish(principal, raws, key)
    gw.metrics.events_published += len(offsets)
    return json_response({"offsets": [offset_dict(o) for o in offsets]}, 202)


def _etag_matches(header: str, etag: str) -> bool:
    # Weak comparison (RFC 9110 13.1.2): the W/ prefix is ignored on both sides.
    wanted = etag.removeprefix("W/")
    tags = [t.strip() for t in header.split(",")]
    return any(t == "*" or t.removeprefix("W/") == wanted for t in tags)


async def get_view(request: Request) -> Response:
    gw = _gateway(request)
    principal = await authenticate(request, gw.auth, READ)
    view, key = view_and_key(request)
    gw.readable_view(principal, view, key)
    snap = await read_snapshot(gw.client, gw.layout, view, key, gw.frontier_of(view))
    # The rows change only with the key's last change; the frontier and the lag are part of the
    # answer too (a batch that reads nothing new keeps the frontier but may change the lag).
    tag_source = orjson.dumps(
        [snap.epoch, snap.last_change, snap.frontier, snap.lag_ms], option=orjson.OPT_SORT_KEYS
    )
    etag = f'W/"{hashlib.sha256(tag_source).hexdigest()[:24]}"'
    headers = {"ETag": etag, "Cache-Control": "private, no-cache"}
    # A list header may come in several lines, which are one list (RFC 9110 5.3).
    if _etag_matches(", ".join(request.headers.getlist("if-none-match")), etag):
        return Response(status_code=304, headers=headers)
    body: dict[str, Any] = {
        "view": view,
        "key": key,
        "rows": snap.rows,
        "frontier": snap.frontier,
        "position": str(EventId(snap.epoch, snap.position)),
    }
    if snap.lag_ms is not None:
        body["lag_ms"] = snap.lag_ms
    return json_response(body, 200, headers)


async def dev_token(request: Request) -> Response:
    gw = _gateway(request)
    document_ = parse_body(await read_json(request, 4096))
    user = document_.get("user") if isinstance(document_, dict) else None
    if not isinstance(user, str) or DEV_USER_RE.fullmatch(user) is None:
        raise BadRequest(
            "send {\"user\": \"<name>\"}: 1 to 64 letters, digits, '_', '.' or '-'.",
            code="invalid_user",
        )
    scope = document_.get("scope", " ".join(ALL_SCOPES))
    if not isinstance(scope, str) or DEV_SCOPE_RE.fullmatch(scope) is None:
        # A token without any right could do nothing: refuse it rather than issue it.
        raise BadRequest(
            f"scope must be {ALL_SCOPES[0]!r}, {ALL_SCOPES[1]!r} or both, separated by a space.",
            code="invalid_scope",
        )
    scopes = tuple(scope.split())
    token, expires_at = gw.auth.issue(user, scopes, gw.settings.dev_token_ttl)
    response = json_response(
        {"token": token, "subject": user, "scope": " ".join(scopes), "expires_at": int(expires_at)}
    )
    response.set_cookie(
        COOKIE, token, max_age=gw.settings.dev_token_ttl, httponly=True, samesite="lax"
    )
    return response


async def healthz(request: Request) -> Response:
    return json_response({"status": "ok"})


async def readyz(request: Request) -> Response:
    ok, reason = await _gateway(request).ready()
    if ok:
        return json_response({"status": "ready"})
    return json_response({"code": "not_ready", "message": reason}, 503)


async def metrics(request: Request) -> Response:
    gw = _gateway(request)
    # Counted before any await: the hub's set changes as subscribers come and go.
    subscribers = subscribers_by_view(gw.hub.all, gw.app.views)
    text = gw.metrics.render() + await _dead_letters(gw)
    store = gw.settings.store
    kafka = (store.kafka, store.kafka_topic) if store.kafka else None
    text += await gw.metrics.scrape(gw.client, gw.layout.partitions, gw.app.pipelines, subscribers,
                                    kafka)  # fmt: skip
    return PlainTextResponse(text, media_type="text/plain; version=0.0.4")


async def _dead_letters(gw: Gateway) -> str:
    """Each pipeline's dead letters, read from the store at each scrape (one call): they are
    recorded by the pipeline, not by this process."""
    names = list(gw.app.pipelines)
    try:
        async with gw.client.pipeline(transaction=False) as pipe:
            for name in names:
                pipe.hlen(deadletters.key_of(name))
            counts = await pipe.execute()
    except RedisError:
        return ""  # the store is away: /readyz says so; the other figures still count
    lines = [
        "# HELP lv_dead_letters Log entries each pipeline set aside as dead letters.",
        "# TYPE lv_dead_letters gauge",
    ]
    for name, count in zip(names, counts, strict=True):
        lines.append(f'lv_dead_letters{{pipeline="{name}"}} {int(count)}')
    return "\n".join(lines) + "\n"


async def openapi(request: Request) -> Response:
    gw = _gateway(request)
    return JSONResponse(document(gw.settings.dev_tokens, gw.settings.log_feed, gw.app))
