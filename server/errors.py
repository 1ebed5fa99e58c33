"""The gateway's errors: one root, each with a status, a code and a sentence for the user.

Lower layers' errors (the store's, the schema's, the token library's) are translated into these
once, where they are raised; the HTTP and WebSocket boundaries turn them into the one error
shape ``{"code", "message"}`` and never show a stack trace.
"""

from __future__ import annotations

from typing import Any


class GatewayError(Exception):
    """Root of every error the gateway answers a client with."""

    status = 500
    code = "internal_error"

    def __init__(self, message: str, *, code: str | None = None, **extra: Any) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.extra = {k: v for k, v in extra.items() if v is not None}

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, **self.extra}


class BadRequest(GatewayError):
    status = 400
    code = "bad_request"


class Unauthorized(GatewayError):
    status = 401
    code = "token_invalid"


class Forbidden(GatewayError):
    status = 403
    code = "forbidden"


class NotFound(GatewayError):
    status = 404
    code = "not_found"


class PayloadTooLarge(GatewayError):
    status = 413
    code = "body_too_large"


class UnsupportedMediaType(GatewayError):
    status = 415
    code = "unsupported_media_type"


class Unprocessable(GatewayError):
    status = 422
    code = "invalid_event"


class TooManyRequests(GatewayError):
    """A rate was exceeded; ``retry_after`` (whole seconds) is also sent as ``Retry-After``."""

    status = 429
    code = "rate_limited"

    def __init__(self, message: str, *, retry_after: int, code: str | None = None) -> None:
        super().__init__(message, code=code, retry_after=retry_after)
        self.retry_after = retry_after


class Unavailable(GatewayError):
    status = 503
    code = "unavailable"


class SlowConsumer(GatewayError):
    """A subscriber's buffer overflowed; it must resume from its last event id."""

    status = 503
    code = "slow_consumer"


SLOW_CONSUMER = "this subscriber fell too far behind; resume from last_event_id."
"""What a stream that ends as a slow consumer says, whatever its source and transport."""


INTERNAL_MESSAGE = "the gateway failed to answer this request; it has been logged. Try again."
