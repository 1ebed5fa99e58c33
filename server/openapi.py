"""The OpenAPI description of the HTTP API, written by hand and checked against the routes.

The WebSocket endpoint ``/v1/ws`` is not HTTP; docs/PROTOCOL.md describes it.
"""

from __future__ import annotations

from typing import Any

ERROR = {"$ref": "#/components/schemas/Error"}
BEARER: list[dict[str, list[str]]] = [{"bearer": []}, {"accessToken": []}, {"cookie": []}]


def _errors(*statuses: int) -> dict[str, Any]:
    reasons = {
        304: "Not modified: the If-None-Match tag still matches.",
        400: "Malformed request (code says what).",
        401: "No token, or an invalid or expired one.",
        403: "The token does not allow this.",
        404: "Unknown view.",
        413: "Body or batch too large.",
        422: "An event does not match its schema.",
        503: "Store unreachable, or the process is at a limit.",
    }
    out: dict[str, Any] = {}
    for s in statuses:
        if s == 304:
            out["304"] = {"description": reasons[s]}
        else:
            out[str(s)] = {
                "description": reasons[s],
                "content": {"application/json": {"schema": ERROR}},
            }
    return out


VIEW_PARAMS = [
    {"name": "view", "in": "path", "required": True, "schema": {"type": "string"}},
    {"name": "key", "in": "path", "required": True, "schema": {"type": "string"}},
]

SCHEMAS: dict[str, Any] = {
    "Error": {
        "type": "object",
        "required": ["code", "message"],
        "properties": {
            "code": {"type": "string"},
            "message": {"type": "string"},
            "index": {"type": "integer", "description": "Which event of a batch failed."},
            "field": {"type": "string"},
        },
    },
    "Event": {
        "type": "object",
        "required": ["type", "payload"],
        "properties": {
            "type": {"type": "string"},
            "payload": {"type": "object"},
            "time": {"oneOf": [{"type": "integer"}, {"type": "string", "format": "date-time"}]},
        },
        "additionalProperties": False,
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
        },
    },
}


def document(dev_tokens: bool, log_feed: bool = True) -> dict[str, Any]:
    paths: dict[str, Any] = {
        "/v1/events": {
            "post": {
                "summary": "Append one event or a batch to the log, all or nothing.",
                "security": BEARER,
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
                    **_errors(400, 401, 403, 413, 422, 503),
                },
            }
        },
        "/v1/views/{view}/{key}": {
            "get": {
                "summary": "The rows of a view's key, their position and the frontier.",
                "security": BEARER,
                "parameters": [
                    *VIEW_PARAMS,
                    {"name": "If-None-Match", "in": "header", "schema": {"type": "string"}},
                ],
                "responses": {
                    "200": {"description": "The snapshot; ETag header set.",
                            "content": {"application/json": {
                                "schema": {"$ref": "#/components/schemas/Snapshot"}}}},
                    **_errors(304, 401, 403, 404, 503),
                },
            }
        },
        "/v1/views/{view}/{key}/live": {
            "get": {
                "summary": "Server-Sent Events: a snapshot, then every delta (docs/PROTOCOL.md).",
                "security": BEARER,
                "parameters": [
                    *VIEW_PARAMS,
                    {"name": "Last-Event-ID", "in": "header", "schema": {"type": "string"}},
                    {"name": "last_event_id", "in": "query", "schema": {"type": "string"}},
                ],
                "responses": {
                    "200": {"description": "An event stream.",
                            "content": {"text/event-stream": {"schema": {"type": "string"}}}},
                    **_errors(400, 401, 403, 404, 503),
                },
            }
        },
        "/healthz": {"get": {"summary": "The process is up.",
                             "responses": {"200": {"description": "Up."}}}},
        "/readyz": {"get": {"summary": "The store is reachable and the change feed reads it.",
                            "responses": {"200": {"description": "Ready."}, **_errors(503)}}},
        "/metrics": {"get": {"summary": "Prometheus text format.",
                             "responses": {"200": {"description": "Metrics.",
                                                   "content": {"text/plain": {}}}}}},
        "/openapi.json": {"get": {"summary": "This document.",
                                  "responses": {"200": {"description": "OpenAPI 3.1."}}}},
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
                        "schema": {"type": "integer", "minimum": 0, "maximum": 100, "default": 20},
                    }
                ],
                "responses": {
                    "200": {
                        "description": "An event stream of log frames.",
                        "content": {"text/event-stream": {"schema": {"type": "string"}}},
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
                    "properties": {"user": {"type": "string"}, "scope": {"type": "string"}}}}}},
                "responses": {"200": {"description": "A signed token."}, **_errors(400)},
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
            "schemas": SCHEMAS,
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer", "bearerFormat": "JWT"},
                "accessToken": {"type": "apiKey", "in": "query", "name": "access_token"},
                "cookie": {"type": "apiKey", "in": "cookie", "name": "lv_token"},
            },
        },
    }
