"""The client's errors: one root, ``LiveviewsClientError``, each with a ``code`` a program can
switch on and a ``message`` for people. A refusal of the gateway keeps its code (docs/PROTOCOL.md,
section 2); failures of the network and of the protocol are translated here, once."""

from __future__ import annotations

from typing import Any

import orjson

from liveviews.errors import LiveviewsError

TOKEN_CODES = frozenset({"token_missing", "token_invalid", "token_expired"})


class LiveviewsClientError(LiveviewsError):
    """Root of every error the client raises.

    ``code`` is the gateway's machine-readable code when it refused something, else one of
    ``connection_lost``, ``protocol_error``, ``invalid_state``. ``idempotency_key`` is set on
    the error of a publish, so that the batch can be sent again later without appending it twice.
    """

    code = "client_error"

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        status: int | None = None,
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message, code=code)
        self.status = status
        self.details = details or {}
        self.idempotency_key: str | None = None


class GatewayError(LiveviewsClientError):
    """The gateway refused a request, over HTTP (``status`` set) or WebSocket (``status`` None).
    ``details`` holds the error's other fields (``index``, ``field``, ``last_event_id``, ...)."""


class ConnectionLost(LiveviewsClientError):
    """The gateway could not be reached, or the connection to it was lost."""

    code = "connection_lost"


class ProtocolError(LiveviewsClientError):
    """The gateway sent something that docs/PROTOCOL.md does not describe."""

    code = "protocol_error"


class ClientStateError(LiveviewsClientError):
    """A call the object's state does not allow, e.g. subscribing on a closed client."""

    code = "invalid_state"


def gateway_error(body: dict[str, Any], status: int | None = None) -> GatewayError:
    """The error object ``{code, message, ...}`` of the gateway as a GatewayError."""
    code = body.get("code")
    message = body.get("message")
    details = {k: v for k, v in body.items() if k not in ("type", "sub", "req", "code", "message")}
    return GatewayError(
        message if isinstance(message, str) else f"the gateway answered {code}",
        code=code if isinstance(code, str) else "error",
        status=status,
        details=details,
    )


def http_error(status: int, body: bytes) -> GatewayError:
    """An HTTP answer other than 2xx: the gateway's error object, or, from something else on
    the way (a proxy's page), ``http_<status>``."""
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        parsed = None
    if not (isinstance(parsed, dict) and isinstance(parsed.get("code"), str)):
        parsed = {"code": f"http_{status}", "message": f"the gateway answered HTTP {status}"}
    return gateway_error(parsed, status)


def is_token_error(error: BaseException | None) -> bool:
    """Whether a refusal can go away with a new token."""
    return isinstance(error, GatewayError) and error.code in TOKEN_CODES
