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

    def headers(self) -> dict[str, str]:
        """Extra response headers (Retry-After on a 503 or 429)."""
        return {}


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


class Unprocessable(GatewayError):
    """A well-formed request the gateway refuses for what it means (a model whose base URL is the gateway itself)."""

    status, type, code = 422, "invalid_request_error", "unprocessable"


class PayloadTooLarge(GatewayError):
    status, type, code = 413, "invalid_request_error", "payload_too_large"


class UpstreamUnavailable(GatewayError):
    status, type, code = 502, "upstream_error", "upstream_unavailable"


class UpstreamProtocolError(GatewayError):
    status, type, code = 502, "upstream_error", "upstream_protocol_error"


class PausedTooLong(GatewayError):
    status, type, code = 503, "server_error", "paused_too_long"


class InternalError(GatewayError):
    """A bug of the gateway's own: answered as an OpenAI-style error (never a bare 500) and logged with its trace."""

    status, type, code = 500, "server_error", "internal_error"


class RetryLater(GatewayError):
    """A 503 the client retries after `retry_after_s` (sent as Retry-After): nothing was done."""

    status, type = 503, "server_error"
    retry_after_s = 1

    def headers(self) -> dict[str, str]:
        return {"retry-after": str(self.retry_after_s)}


class StoreUnavailable(RetryLater):
    """The database is locked, busy, full or unreachable: nothing was written; retry after `retry_after_s`."""

    code = "store_unavailable"


class QuotaExceeded(GatewayError):
    """A per-rollout count quota (calls) is spent: 429; the message names the limit and its setting."""

    status, type, code = 429, "rate_limit_error", "quota_exceeded"


def error_body(message: str, type_: str, *, code: str | None = None, param: str | None = None) -> bytes:
    """An OpenAI-style error object: {"error": {"message", "type", "param", "code"}}."""
    return orjson.dumps({"error": {"message": message, "type": type_, "param": param, "code": code}})
