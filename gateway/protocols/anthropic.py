"""Anthropic Messages (`POST /v1/messages`) as a `ProtocolAdapter` over chat completions.

What is translated, accepted and ignored, or refused: `anthropic_request`; the answer and its SSE events:
`anthropic_answer`. Errors: `{"type": "error", "error": {"type", "message"}}` with Anthropic's error types.
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson

from gateway.asgi import json_object
from gateway.protocols import anthropic_answer, anthropic_request
from gateway.protocols.base import ModelFault

KIND = "messages"
COUNT_KIND = "count_tokens"


class MessagesAdapter:
    """The `ProtocolAdapter` of Anthropic Messages (see `gateway.protocols.base`)."""

    kind = KIND

    def parse(self, raw: bytes) -> dict[str, Any]:
        body = json_object(raw)
        anthropic_request.check_fields(body, count_tokens=False)
        return body

    def parse_count(self, raw: bytes) -> dict[str, Any]:
        """A `count_tokens` request body (as `parse`; `max_tokens` may be absent)."""
        body = json_object(raw)
        anthropic_request.check_fields(body, count_tokens=True)
        return body

    def previous_id(self, body: dict[str, Any]) -> str | None:
        return None  # Messages is stateless: every request carries its whole conversation

    def response_id(self, rollout_id: str, attempt: int, seq: int) -> str:
        digest = hashlib.blake2b(f"{rollout_id}|{attempt}|{seq}".encode(), digest_size=12).hexdigest()
        return f"msg_{digest}"

    def to_chat(self, body: dict[str, Any], earlier: list[Any]) -> dict[str, Any]:
        return anthropic_request.to_chat(body)

    def continued(self, body: dict[str, Any], response_raw: bytes | str) -> None:
        return None  # no request continues an earlier answer

    def answer_turn(self, response_raw: bytes | str) -> dict[str, Any]:
        return anthropic_request.assistant_message(anthropic_answer.recorded_content(response_raw))

    def from_chat(self, answer: dict[str, Any], body: dict[str, Any], response_id: str) -> dict[str, Any]:
        return anthropic_answer.from_chat(answer, body, response_id)

    def model_fault(self, answer: dict[str, Any]) -> ModelFault | None:
        return anthropic_answer.answer_fault(answer)

    def stream(self, body: dict[str, Any], response_id: str) -> anthropic_answer.MessagesStream:
        return anthropic_answer.MessagesStream(body, response_id)

    def error_body(self, status: int, message: str, code: str | None) -> bytes:
        return orjson.dumps(anthropic_answer.error_object(status, message, code))


ADAPTER = MessagesAdapter()
