"""Cross-origin requests (``LV_CORS_ORIGINS``): Starlette's CORS middleware, with a refused
preflight answered in the gateway's one error shape instead of Starlette's plain text."""

from __future__ import annotations

from starlette.datastructures import Headers
from starlette.middleware.cors import CORSMiddleware
from starlette.responses import Response

from liveviews.gateway.api.responses import json_response

CORS_REFUSED = "cors_refused"
_DROPPED = {"content-length", "content-type"}


class GatewayCORS(CORSMiddleware):
    def preflight_response(self, request_headers: Headers) -> Response:
        response = super().preflight_response(request_headers)
        if response.status_code != 400:
            return response
        # Starlette says what it refused: "Disallowed CORS origin, method, headers".
        refused = bytes(response.body).decode().removeprefix("Disallowed CORS ").strip()
        message = (
            f"this gateway does not allow this cross-origin request ({refused or 'refused'}): "
            "serve the page from an origin listed in LV_CORS_ORIGINS, and send only the methods "
            "and headers this answer's Access-Control-Allow-Methods and -Headers list."
        )
        headers = {k: v for k, v in response.headers.items() if k.lower() not in _DROPPED}
        return json_response(
            {"code": CORS_REFUSED, "message": message, "refused": refused.split(", ")},
            400,
            headers,
        )
