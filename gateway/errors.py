"""OpenAI-shaped error bodies: {"error": {"message", "type", "param", "code"}}."""

from __future__ import annotations

import json

TYPES = {400: "invalid_request_error", 401: "invalid_request_error", 404: "invalid_request_error",
         413: "invalid_request_error", 429: "rate_limit_error", 500: "server_error", 503: "service_unavailable",
         504: "timeout"}


def error_body(status: int, message: str, *, code: str | None = None, param: str | None = None) -> bytes:
    return json.dumps({"error": {"message": message, "type": TYPES.get(status, "api_error"), "param": param,
                                 "code": code}}).encode()
