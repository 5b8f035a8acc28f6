"""The OpenAI Responses API (`POST /r/{id}/v1/responses`) as a ProtocolAdapter over the engine's chat completions.

Stateless: the gateway keeps no conversation state of its own beyond the calls it records, so `store: false` and
`store: true` behave alike, and `previous_response_id` is served from the rollout's own recorded calls: each answer
is recorded with its continuation (its chain's turns, then its own: `continued`, the call's input items and output
items), and a call that continues it gets them prepended (`gateway/continuation.py`). What each request field becomes
is in `responses_request.py`; the answer and its SSE events in `responses_answer.py` and `responses_stream.py`.
"""

from __future__ import annotations

from typing import Any

from gateway.asgi import json_object
from gateway.errors import BadRequest, error_body
from gateway.protocols.base import ModelFault
from gateway.protocols.responses_answer import from_chat, recorded_output, response_id
from gateway.protocols.responses_request import add_items, as_items, chat_request, check_fields, sent_items
from gateway.protocols.responses_stream import ResponsesStream

ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
               404: "not_found_error", 405: "invalid_request_error", 409: "conflict_error",
               413: "invalid_request_error", 429: "rate_limit_error", 502: "upstream_error"}
"""OpenAI error `type` by HTTP status, as the chat path answers them (`gateway.errors`); others: server_error."""


class ResponsesAdapter:
    """OpenAI Responses <-> chat completions; errors in OpenAI's shape (as the chat path answers them)."""

    kind = "responses"

    def parse(self, raw: bytes) -> dict[str, Any]:
        body = json_object(raw)
        if not isinstance(body.get("stream", False), bool):
            raise BadRequest("'stream' must be a boolean", param="stream")
        if not isinstance(body.get("model", ""), str):
            raise BadRequest("'model' must be a string", param="model")
        if not isinstance(body.get("previous_response_id") or "", str):
            raise BadRequest("'previous_response_id' must be a string", param="previous_response_id")
        check_fields(body)
        return body

    def previous_id(self, body: dict[str, Any]) -> str | None:
        return body.get("previous_response_id") or None

    def response_id(self, rollout_id: str, attempt: int, seq: int) -> str:
        return response_id(rollout_id, attempt, seq)

    def to_chat(self, body: dict[str, Any], earlier: list[Any]) -> dict[str, Any]:
        return chat_request(body, [{"input": turn[0]} for turn in earlier], [turn[1] for turn in earlier])

    def continued(self, body: dict[str, Any], response_raw: bytes | str) -> list[list[Any]]:
        """[the call's input items, its answer's output items], each as the engine got them (`sent_items`): what
        `previous_response_id` prepends (the instructions are not carried over)."""
        return [sent_items(as_items(body.get("input", []))), sent_items(recorded_output(response_raw))]

    def answer_turn(self, response_raw: bytes | str) -> dict[str, Any] | None:
        messages: list[dict[str, Any]] = []
        add_items(messages, recorded_output(response_raw), "output")
        return messages[0] if len(messages) == 1 else None

    def from_chat(self, answer: dict[str, Any], body: dict[str, Any], response_id: str) -> dict[str, Any]:
        return from_chat(answer, body, response_id)

    def model_fault(self, answer: dict[str, Any]) -> ModelFault | None:
        return None  # function_call arguments are a string: whatever the model wrote is carried as it came

    def stream(self, body: dict[str, Any], response_id: str) -> ResponsesStream:
        return ResponsesStream(body, response_id)

    def error_body(self, status: int, message: str, code: str | None) -> bytes:
        return error_body(message, ERROR_TYPES.get(status, "server_error"), code=code)


RESPONSES = ResponsesAdapter()
