"""The seam between a harness protocol the engine does not speak (Anthropic Messages, OpenAI Responses) and the
engine's chat completions: an adapter translates the harness's request into one chat-completions request (tools
included, so the engine applies the model's own chat template and tool format) and the engine's answer back into
the harness's protocol, unary or as that protocol's own SSE events. The forwarder (`gateway/translated.py`) records
the harness's request and the answer it saw, with the engine's exact token IDs, logprobs and policy version.
"""

from __future__ import annotations

from typing import Any, Protocol


class StreamTranslator(Protocol):
    """Turns one upstream chat-completions stream into the harness protocol's SSE events, chunk by chunk."""

    def feed(self, chunk: dict[str, Any]) -> bytes:
        """One decoded upstream `chat.completion.chunk` -> zero or more complete SSE events (bytes) to send now."""
        ...

    def finish(self) -> bytes:
        """The closing events (sent only once the call is recorded)."""
        ...

    def error(self, message: str, code: str) -> bytes:
        """An error event that ends the stream in place of the closing events."""
        ...


class ProtocolAdapter(Protocol):
    """One harness protocol translated to and from chat completions."""

    kind: str  # the CallRecord.kind of its calls, e.g. "messages" or "responses"

    def parse(self, raw: bytes) -> dict[str, Any]:
        """The harness's JSON body, checked; BadRequest (with `param`) names what the gateway cannot honour."""
        ...

    def previous_id(self, body: dict[str, Any]) -> str | None:
        """The id of an earlier answer this request continues (Responses' `previous_response_id`); None if none."""
        ...

    def response_id(self, upstream_id: str | None, seq: int) -> str:
        """The id the harness sees for this answer (stored as the call's `response_id`, so a later
        `previous_id` finds the call)."""
        ...

    def to_chat(self, body: dict[str, Any], history: list[dict[str, Any]]) -> dict[str, Any]:
        """The chat-completions request (without `model`, `stream`, token-id and logprob flags: the forwarder sets
        them). `history` holds the rollout's earlier calls this one continues (following `previous_id` back, oldest
        first), each `{"request": <the harness's request dict>, "response_raw": <the answer as the harness saw it,
        JSON or SSE text>}`; empty when `previous_id` is None."""
        ...

    def from_chat(self, answer: dict[str, Any], body: dict[str, Any]) -> dict[str, Any]:
        """The harness protocol's answer built from the engine's (non-streamed) chat-completions answer."""
        ...

    def stream(self, body: dict[str, Any]) -> StreamTranslator:
        """A translator for one streamed answer to `body`."""
        ...

    def error_body(self, status: int, message: str, code: str | None) -> bytes:
        """An error in the protocol's own shape (Anthropic: `{"type": "error", "error": {...}}`)."""
        ...
