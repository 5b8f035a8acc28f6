"""Gateway errors as data: each carries its HTTP status and renders as an OpenAI-style error body."""

from __future__ import annotations

import orjson


class GatewayError(Exception):
    """Base error; `status` is the HTTP status, `type` and `code` follow OpenAI's error object."""

    status = 500
    type = "server_error"
    code: str | None = None

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        if code is not None:
            self.code = code

    def body(self) -> bytes:
        """The JSON body sent to the client."""
        return error_body(self.message, self.type, code=self.code, param=self.param)


class BadRequest(GatewayError):
    status, type, code = 400, "invalid_request_error", "invalid_request"


class Unauthorized(GatewayError):
    status, type, code = 401, "authentication_error", "invalid_api_key"


class Forbidden(GatewayError):
    status, type, code = 403, "permission_error", "forbidden"


class NotFound(GatewayError):
    status, type, code = 404, "not_found_error", "not_found"


class MethodNotAllowed(GatewayError):
    status, type, code = 405, "invalid_request_error", "method_not_allowed"


class Conflict(GatewayError):
    status, type, code = 409, "conflict_error", "conflict"


class InvalidTransition(Conflict):
    code = "invalid_transition"


class PayloadTooLarge(GatewayError):
    status, type, code = 413, "invalid_request_error", "payload_too_large"


class UpstreamUnavailable(GatewayError):
    status, type, code = 502, "upstream_error", "upstream_unavailable"


class PausedTooLong(GatewayError):
    status, type, code = 503, "server_error", "paused_too_long"


def error_body(message: str, type_: str, *, code: str | None = None, param: str | None = None) -> bytes:
    """An OpenAI-style error object: {"error": {"message", "type", "param", "code"}}."""
    return orjson.dumps({"error": {"message": message, "type": type_, "param": param, "code": code}})
