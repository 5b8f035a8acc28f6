"""The seam between a harness protocol the engine does not speak (Anthropic Messages, OpenAI Responses) and the
engine's chat completions: an adapter translates the harness's request into one chat-completions request (tools
included, so the engine applies the model's own chat template and tool format) and the engine's answer back into
the harness's protocol, unary or as that protocol's own SSE events. The forwarder (`gateway/translated.py`) records
the harness's request and the answer it saw, with the engine's exact token IDs, logprobs and policy version.
An adapter is served by adding it, under its path, to `TRANSLATED` in `gateway/routes/harness.py`; errors on that
path (auth, 404, quotas, upstream failures) are then answered in its `error_body` shape.
"""

from __future__ import annotations

from typing import Any, Protocol


class StreamTranslator(Protocol):
    """Turns one upstream chat-completions stream into the harness protocol's SSE events, chunk by chunk."""

    def feed(self, chunk: dict[str, Any]) -> bytes:
        """One decoded upstream `chat.completion.chunk` (vLLM's: `prompt_token_ids` in the first, `delta.content`,
        `delta.tool_calls[{index, id, function: {name, arguments}}]`, `token_ids`, `finish_reason`, `stop_reason`)
        -> zero or more complete SSE events (bytes) to send now. Chunks carrying an `error` are not fed."""
        ...

    def finish(self) -> bytes:
        """The closing events: computed before the call is recorded (they are part of the recorded answer), sent
        only once it is. Raises `gateway.capture.ProtocolError` when the stream cannot be closed validly (e.g. a
        tool call whose arguments are not a JSON object): the forwarder then sends `error(...)` instead."""
        ...

    def error(self, message: str, code: str) -> bytes:
        """An error event that ends the stream in place of the closing events."""
        ...


class ProtocolAdapter(Protocol):
    """One harness protocol translated to and from chat completions."""

    kind: str  # the CallRecord.kind of its calls, e.g. "messages" or "responses"

    def parse(self, raw: bytes) -> dict[str, Any]:
        """The harness's JSON body, checked; BadRequest (with `param`) names what the gateway cannot honour. The
        forwarder reads `model` (a string, or absent) and `stream` (a boolean, or absent) from it: parse checks both."""
        ...

    def previous_id(self, body: dict[str, Any]) -> str | None:
        """The id of an earlier answer this request continues (Responses' `previous_response_id`); None if none."""
        ...

    def response_id(self, rollout_id: str, attempt: int, seq: int) -> str:
        """The id the harness sees for this answer (e.g. `msg_...`, `resp_...`), fixed before the call goes upstream
        (a stream's first event carries it); stored as the call's `response_id`, so a later `previous_id` finds the
        call. Deterministic and distinct for each (rollout, attempt, seq)."""
        ...

    def to_chat(self, body: dict[str, Any], history: list[dict[str, Any]]) -> dict[str, Any]:
        """The chat-completions request (without `model`, `stream`, token-id and logprob flags: the forwarder sets
        them). `history` holds the rollout's earlier calls this one continues (following `previous_id` back, oldest
        first), each `{"request": <the harness's request dict>, "response_raw": <the answer as the harness saw it,
        JSON or SSE text>}`; empty when `previous_id` is None."""
        ...

    def from_chat(self, answer: dict[str, Any], body: dict[str, Any], response_id: str) -> dict[str, Any]:
        """The harness protocol's answer (with id `response_id`) built from the engine's non-streamed
        chat-completions answer (first choice; vLLM's shape: `message.content`, `message.tool_calls`,
        `finish_reason`, `stop_reason`, `prompt_token_ids`, `token_ids`, `usage`). Raises
        `gateway.capture.ProtocolError` when the answer cannot be translated (e.g. tool-call arguments that are not a
        JSON object): the forwarder records the call and answers 502."""
        ...

    def stream(self, body: dict[str, Any], response_id: str) -> StreamTranslator:
        """A translator for one streamed answer (with id `response_id`) to `body`."""
        ...

    def error_body(self, status: int, message: str, code: str | None) -> bytes:
        """An error in the protocol's own shape (Anthropic: `{"type": "error", "error": {...}}`), for any HTTP
        status the gateway answers (400, 401, 403, 404, 405, 409, 413, 429, 500, 502, 503) and `code`, the gateway's
        error code (e.g. `stale_attempt`, `upstream_unavailable`, `store_unavailable`)."""
        ...
