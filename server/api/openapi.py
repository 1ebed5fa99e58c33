"""The OpenAPI description of the HTTP API, written by hand and checked against the routes.

The application's views and event payloads are described from its declarations, so a client
(or a fuzzer) knows the view names and what each event type must carry. The WebSocket endpoint
``/v1/ws`` is not HTTP; docs/PROTOCOL.md describes it.
"""

from __future__ import annotations

from typing import Any

from liveviews.app import App
from liveviews.log.events import MAX_EVENT_TIME_MS
from liveviews.schema import Boolean, FieldType, Float, Json, Schema, String

ERROR = {"$ref": "#/components/schemas/Error"}
BEARER: list[dict[str, list[str]]] = [{"bearer": []}, {"accessToken": []}, {"cookie": []}]


STREAM_ID = {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,64}$"}
STREAM_PARAM = {
    "name": "stream", "in": "query", "schema": STREAM_ID,
    "description": "An id the client chooses for this stream, to post its waits to "
    "/v1/streams/{stream}/wait.",
}  # fmt: skip


def _errors(*statuses: int) -> dict[str, Any]:
    reasons = {
        304: "Not modified: the If-None-Match tag still matches.",
        400: "Malformed request (code says what).",
        401: "No token, or an invalid or expired one.",
        403: "The token does not allow this.",
        404: "Unknown view, or a key that is empty, too long or not UTF-8.",
        413: "Body or batch too large.",
        415: "The body is not sent as application/json.",
        422: "An event does not match its schema.",
        429: "The subject is over its publish rate; retry after Retry-After seconds.",
        503: "Store unreachable, or the process is at a limit.",
    }
    out: dict[str, Any] = {}
    for s in statuses:
        if s == 304:
            out["304"] = {"description": reasons[s], "headers": {"ETag": ETAG}}
        elif s == 429:
            out["429"] = {
                "description": reasons[s],
                "headers": {"Retry-After": {"schema": {"type": "integer", "minimum": 1}}},
                "content": {"application/json": {"schema": ERROR}},
            }
        else:
            out[str(s)] = {
                "description": reasons[s],
                "content": {"application/json": {"schema": ERROR}},
            }
        if s == 401:
            out["401"]["headers"] = {
                "WWW-Authenticate": {"required": True, "schema": {"type": "string"}}
            }
    return out


ETAG = {"required": True, "schema": {"type": "string"}}
EVENT_ID = {
    "type": "string",
    "pattern": r"^$|^[A-Za-z0-9_-]{1,64}\.[0-9]{1,20}-[0-9]{1,20}$",
    "description": "An event id as the gateway sent it (docs/PROTOCOL.md, section 3); "
    "empty means none. Sent once: a repeated one is refused.",
}

KEY_EVENT_ID = {
    **EVENT_ID,
    "pattern": r"^$|^[A-Za-z0-9_-]{1,64}\.[0-9]{1,20}-[0-9]{1,20}(\.[A-Za-z0-9_-]*)?$",
    "description": "An event id of this key, or of this window of it (with limit), as the "
    "gateway sent it (docs/PROTOCOL.md, section 3); empty means none.",
}
PREFIX_EVENT_ID = {
    "type": "string",
    "maxLength": 1024,
    "pattern": r"^$|^[A-Za-z0-9_-]{1,64}\.(0|[0-9]{1,20}-[0-9]{1,20})"
    r"(~(0|[0-9]{1,20}-[0-9]{1,20}))*(\.[0-9a-f]{16})?$",
    "description": "An event id of this prefix subscription as the gateway sent it "
    "(docs/PROTOCOL.md, section 3): a position per change-topic shard, and a filtered "
    "subscription's filter digest; empty means none.",
}


def _view_params(views: list[str] | None) -> list[dict[str, Any]]:
    view: dict[str, Any] = {"type": "string"}
    if views:
        view["enum"] = views
    # A key is 1 to 256 characters, one segment of the path: a '/' in it is written %2F.
    key = {"type": "string", "minLength": 1, "maxLength": 256,
           "description": "The key, percent-encoded: a '/' in it is written %2F."}  # fmt: skip
    return [
        {"name": "view", "in": "path", "required": True, "schema": view},
        {"name": "key", "in": "path", "required": True, "schema": key},
    ]


def _field_schema(ftype: FieldType) -> dict[str, Any]:
    out: dict[str, Any]
    if isinstance(ftype, Boolean | Float | Json):
        out = {Boolean: {"type": "boolean"}, Float: {"type": "number"}, Json: {}}[type(ftype)]
    elif isinstance(ftype, String):
        out = {
            "type": "string", "minLength": ftype.min_length, "maxLength": ftype.max_length,
        }  # fmt: skip
        if ftype.pattern is not None:
            out["pattern"] = f"^(?:{ftype.pattern})$"
    else:
        out = {"type": "integer"}
        if ftype.minimum is not None:
            out["minimum"] = ftype.minimum
        if ftype.maximum is not None:
            out["maximum"] = ftype.maximum
    if ftype.optional:
        return {"anyOf": [out, {"type": "null"}]}
    return out


def _payload_schema(schema: Schema) -> dict[str, Any]:
    """The fields of a payload; a check across fields (e.g. 'not yourself') is not expressible."""
    return {
        "type": "object",
        "required": sorted(n for n, f in schema.fields.items() if not f.optional),
        "properties": {n: _field_schema(f) for n, f in schema.fields.items()},
        "additionalProperties": False,
    }


def _event_schema(app: App | None) -> dict[str, Any]:
    # Event time: Unix milliseconds or ISO-8601; absent or null means the time of the append.
    time = {"oneOf": [{"type": "integer", "minimum": 0, "maximum": MAX_EVENT_TIME_MS},
                      {"type": "string", "format": "date-time"}, {"type": "null"}]}  # fmt: skip
    if app is None:
        return {
            "type": "object",
            "required": ["type", "payload"],
            "properties": {"type": {"type": "string"}, "payload": {"type": "object"},
                           "time": time},
            "additionalProperties": False,
        }  # fmt: skip
    return {
        "oneOf": [
            {
                "type": "object",
                "description": et.description,
                "required": ["type", "payload"],
                "properties": {
                    "type": {"const": name},
                    "payload": _payload_schema(et.schema),
                    "time": time,
                },
                "additionalProperties": False,
            }  # fmt: skip
            for name, et in sorted(app.event_types.items())
            if et.publishable  # a declared table's changes come from its database only
        ]
    }


SCHEMAS: dict[str, Any] = {
    "Error": {
        "type": "object",
        "required": ["code", "message"],
        "properties": {
            "code": {"type": "string"},
            "message": {"type": "string"},
            "index": {"type": "integer", "description": "Which event of a batch failed."},
            "field": {"type": "string"},
            "appended": {
                "type": "array",
                "items": {"oneOf": [{"$ref": "#/components/schemas/Offset"}, {"type": "null"}]},
                "description": "partial_append (a store cluster): each event's offset, or null "
                "for one not appended; send the batch again with the same Idempotency-Key.",
            },
        },
    },
    "Offset": {
        "type": "object",
        "required": ["partition", "id", "token"],
        "properties": {
            "partition": {"type": "integer"},
            "id": {"type": "string", "example": "1732170000000-0"},
            "token": {"type": "string", "example": "2:1732170000000-0"},
        },
    },
    "Frontier": {
        "type": "object",
        "additionalProperties": {"type": "string"},
        "description": "Log partition -> entry id up to which the views reflect the log.",
    },
    "Snapshot": {
        "type": "object",
        "required": ["view", "key", "rows", "frontier", "position"],
        "properties": {
            "view": {"type": "string"},
            "key": {"type": "string"},
            "rows": {"type": "object", "additionalProperties": True},
            "frontier": {"$ref": "#/components/schemas/Frontier"},
            "position": {"type": "string", "description": "An event id to resume from."},
            "lag_ms": {
                "type": "integer",
                "minimum": 0,
                "description": "How far (ms) the frontier was behind the log's head when its"
                " batch committed; absent when not recorded.",
            },
        },
    },
}


DEV_TOKEN = {
    "type": "object",
    "required": ["token", "subject", "scope", "expires_at"],
    "properties": {
        "token": {"type": "string"},
        "subject": {"type": "string"},
        "scope": {"type": "string"},
        "expires_at": {"type": "integer", "description": "Unix seconds."},
    },
}
STATUS = {"type": "object", "required": ["status"], "properties": {"status": {"type": "string"}}}


def _sse_event(kind: str, with_id: bool) -> dict[str, Any]:
    """One event of a stream, as OpenAPI 3.1 reads an event stream's schema: one per event."""
    return {
        "type": "object",
        "required": ["event", "data", *(["id"] if with_id else [])],
        "properties": {
            "event": {"const": kind},
            "data": {"type": "string", "contentMediaType": "application/json"},
            **({"id": {"type": "string"}} if with_id else {}),
        },
    }


VIEW_STREAM = {"oneOf": [
    _sse_event("snapshot", True), _sse_event("delta", True), _sse_event("progress", False),
    _sse_event("reset", False), _sse_event("end", False),
]}  # fmt: skip
LOG_STREAM = {"oneOf": [_sse_event("log", False), _sse_event("end", False)]}
GROUP_STREAM = {"oneOf": [_sse_event("group", True), _sse_event("end", False)]}
GROUP_EVENT_ID = {"type": "string", "maxLength": 4096, "pattern": r"^$|^g\.[A-Za-z0-9_-]+$"}


def _json(schema: dict[str, Any]) -> dict[str, Any]:
    return {"application/json": {"schema": schema}}


def document(dev_tokens: bool, log_feed: bool = True, app: App | None = None) -> dict[str, Any]:
    """The document; with ``app``, its view names and event payloads are described too."""
    views = sorted(app.views) if app is not None else None
    paths: dict[str, Any] = {
        "/v1/events": {
            "post": {
                "summary": "Append one event or a batch to the log, once per Idempotency-Key; "
                "all or nothing on a single store server (docs/PROTOCOL.md, section 2).",
                "security": BEARER,
                "parameters": [
                    {"name": "Idempotency-Key", "in": "header",
                     "schema": {"type": "string", "pattern": "^[\\x21-\\x7e]{1,200}$"},
                     "description": "The same batch sent again with its key within 24 hours "
                     "gets the same offsets and appends nothing twice."},
                ],  # fmt: skip
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": {"oneOf": [
                        {"$ref": "#/components/schemas/Event"},
                        {"type": "array", "items": {"$ref": "#/components/schemas/Event"}},
                        {"type": "object", "required": ["events"], "properties": {
                            "events": {"type": "array",
                                       "items": {"$ref": "#/components/schemas/Event"}}}},
                    ]}}},
                },
                "responses": {
                    "202": {"description": "Appended; one offset per event, in order.",
                            "content": {"application/json": {"schema": {
                                "type": "object", "properties": {"offsets": {
                                    "type": "array",
                                    "items": {"$ref": "#/components/schemas/Offset"}}}}}}},
                    **_errors(400, 401, 403, 413, 415, 422, 429, 503),
                },
            }
        },
        "/v1/views/{view}/{key}": {
            "get": {
                "summary": "The rows of a view's key, their position and the frontier.",
                "security": BEARER,
                "parameters": [
                    *_view_params(views),
                    {"name": "If-None-Match", "in": "header", "schema": {"type": "string"},
                     "description": "Entity tags, compared weakly; several lines are one list."},
                ],
                "responses": {
                    "200": {"description": "The snapshot; ETag header set.",
                            "headers": {"ETag": ETAG},
                            "content": {"application/json": {
                                "schema": {"$ref": "#/components/schemas/Snapshot"}}}},
                    **_errors(304, 401, 403, 404, 503),
                },
            }
        },
        "/v1/views/{view}/{key}/live": {
            "get": {
                "summary": "Server-Sent Events: a snapshot, then every delta (docs/PROTOCOL.md); "
                "with limit, a window of the key's rows in score order (section 5.1).",
                "security": BEARER,
                "parameters": [
                    *_view_params(views),
                    {"name": "Last-Event-ID", "in": "header", "schema": KEY_EVENT_ID},
                    {"name": "last_event_id", "in": "query", "schema": KEY_EVENT_ID},
                    {"name": "limit", "in": "query",
                     "schema": {"type": "integer", "minimum": 1},
                     "description": "A window: the key's first rows in score order, at most "
                     "the view's limit."},
                    {"name": "after_score", "in": "query", "schema": {"type": "number"},
                     "description": "With after_row and limit: a page after this row."},
                    {"name": "after_row", "in": "query", "schema": {"type": "string"}},
                    STREAM_PARAM,
                ],
                "responses": {
                    "200": {"description": "An event stream of frames (docs/PROTOCOL.md).",
                            "content": {"text/event-stream": {"schema": VIEW_STREAM}}},
                    **_errors(400, 401, 403, 404, 503),
                },
            }
        },
        "/v1/live": {
            "get": {
                "summary": "Server-Sent Events: the keys of a listable view with a prefix, or "
                "all of them, and of their rows those a filter matches (docs/PROTOCOL.md, "
                "sections 5.1 and 5.2).",
                "security": BEARER,
                "parameters": [
                    {"name": "view", "in": "query", "required": True,
                     "schema": {"type": "string", **({"enum": views} if views else {})}},
                    {"name": "prefix", "in": "query",
                     "schema": {"type": "string", "maxLength": 256}},
                    {"name": "filter", "in": "query",
                     "description": "Only the rows that match this filter, as JSON "
                     "(docs/PROTOCOL.md, section 5.2), e.g. "
                     '{"field": "assignee", "eq": "ada"}.',
                     "schema": {"type": "string", "maxLength": 4096}},
                    {"name": "Last-Event-ID", "in": "header", "schema": PREFIX_EVENT_ID},
                    {"name": "last_event_id", "in": "query", "schema": PREFIX_EVENT_ID},
                    STREAM_PARAM,
                ],
                "responses": {
                    "200": {"description": "An event stream of frames (docs/PROTOCOL.md).",
                            "content": {"text/event-stream": {"schema": VIEW_STREAM}}},
                    **_errors(400, 401, 403, 404, 503),
                },
            }
        },
        "/v1/groups/live": {
            "get": {
                "summary": "Server-Sent Events: several keys as one group, released together "
                "at positions of the log every member reflects, in one stream "
                "(docs/PROTOCOL.md, section 5.3). Members are named m0, m1, ... in order.",
                "security": BEARER,
                "parameters": [
                    {"name": "view", "in": "query", "required": True,
                     "description": "Each member's view, repeated, in pairs with 'key'.",
                     "schema": {"type": "string", **({"enum": views} if views else {})}},
                    {"name": "key", "in": "query", "required": True,
                     "description": "Each member's key, repeated, in pairs with 'view'.",
                     "schema": {"type": "string", "minLength": 1, "maxLength": 256}},
                    {"name": "Last-Event-ID", "in": "header", "schema": GROUP_EVENT_ID},
                    {"name": "last_event_id", "in": "query", "schema": GROUP_EVENT_ID},
                    STREAM_PARAM,
                ],
                "responses": {
                    "200": {"description": "An event stream of group frames "
                            "(docs/PROTOCOL.md, section 5.3).",
                            "content": {"text/event-stream": {"schema": GROUP_STREAM}}},
                    **_errors(400, 401, 403, 404, 503),
                },
            }
        },
        "/v1/streams/{stream}/wait": {
            "post": {
                "summary": "Read-your-writes over SSE: the streams opened with this stream id "
                "by the same subject are sent the frontier that covers the offsets as soon as "
                "it is read (docs/PROTOCOL.md, section 4).",
                "security": BEARER,
                "parameters": [{"name": "stream", "in": "path", "required": True,
                                "schema": STREAM_ID}],
                "requestBody": {"required": True, "content": _json({
                    "type": "object", "required": ["offsets"],
                    "properties": {"offsets": {
                        "type": "array", "minItems": 1, "maxItems": 64,
                        "items": {"type": "object", "required": ["partition", "id"],
                                  "properties": {"partition": {"type": "integer", "minimum": 0},
                                                 "id": {"type": "string"}}}}}})},
                "responses": {
                    "204": {"description": "Passed on to the process holding the stream, if "
                            "one does."},
                    **_errors(400, 401, 403, 404, 413, 415, 422, 503),
                },
            }
        },
        "/healthz": {"get": {"summary": "The process is up.",
                             "responses": {"200": {"description": "Up.",
                                                   "content": _json(STATUS)}}}},
        "/readyz": {"get": {"summary": "The store is reachable and the change feed reads it.",
                            "responses": {"200": {"description": "Ready.",
                                                  "content": _json(STATUS)},
                                          **_errors(503)}}},
        "/metrics": {"get": {"summary": "Prometheus text format.",
                             "responses": {"200": {"description": "Metrics.",
                                                   "content": {"text/plain": {}}}}}},
        "/openapi.json": {"get": {"summary": "This document.",
                                  "responses": {"200": {"description": "OpenAPI 3.1.",
                                                        "content": _json({"type": "object"})}}}},
    }  # fmt: skip
    if log_feed:
        paths["/v1/log/live"] = {
            "get": {
                "summary": "Server-Sent Events: the log's recent entries, then each new one "
                "(docs/PROTOCOL.md, section 9). Not resumable.",
                "security": BEARER,
                "parameters": [
                    {
                        "name": "recent",
                        "in": "query",
                        "description": "ASCII digits, sent once.",
                        "schema": {"type": "integer", "minimum": 0, "maximum": 100, "default": 20},
                    }
                ],
                "responses": {
                    "200": {
                        "description": "An event stream of log frames.",
                        "content": {"text/event-stream": {"schema": LOG_STREAM}},
                    },
                    **_errors(400, 401, 403, 503),
                },
            }
        }
    if dev_tokens:
        paths["/v1/dev/token"] = {
            "post": {
                "summary": "Development only: a token for any user, also set as a cookie.",
                "requestBody": {"required": True, "content": {"application/json": {"schema": {
                    "type": "object", "required": ["user"],
                    "properties": {"user": {"type": "string", "pattern": "^[A-Za-z0-9_.-]{1,64}$"},
                                   "scope": {"type": "string", "default": "read publish",
                                             "pattern": "^(read|publish)( (read|publish))?$"}}}}}},
                "responses": {"200": {"description": "A signed token; also set as the lv_token "
                                      "cookie.", "content": _json(DEV_TOKEN)},
                              **_errors(400, 413, 415)},
            }
        }  # fmt: skip
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Liveviews gateway",
            "version": "1",
            "description": "Publish events and read live views. The WebSocket endpoint /v1/ws "
            "and the frames of /live are specified in docs/PROTOCOL.md.",
        },
        "paths": paths,
        "components": {
            "schemas": {**SCHEMAS, "Event": _event_schema(app)},
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer", "bearerFormat": "JWT"},
                "accessToken": {"type": "apiKey", "in": "query", "name": "access_token"},
                "cookie": {"type": "apiKey", "in": "cookie", "name": "lv_token"},
            },
        },
    }
