"""The seam between a harness protocol the engine does not speak (Anthropic Messages, OpenAI Responses) and the
engine's chat completions: an adapter translates the harness's request into one chat-completions request (tools
included, so the engine applies the model's own chat template and tool format) and the engine's answer back into
the harness's protocol, unary or as that protocol's own SSE events. The forwarder (`gateway/translated.py`) records
the harness's request and the answer it saw, with the engine's exact token IDs, logprobs and policy version.
An adapter is served by adding it, under its path, to `TRANSLATED` in `gateway/routes/harness.py`; errors on that
path (auth, 404, quotas, upstream failures) are then answered in its `error_body` shape.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from gateway.records import CallErrorCode


@dataclass(frozen=True)
class ModelFault:
    """Why the model's answer could not be carried exactly by the harness protocol and how it was delivered instead
    (recorded on the ok call as `error_code` and `error`): the model's doing, never an engine failure."""

    code: CallErrorCode  # a model_* code
    message: str  # what the model wrote that the protocol cannot carry, and what the harness got instead


class StreamTranslator(Protocol):
    """Turns one upstream chat-completions stream into the harness protocol's SSE events, chunk by chunk."""

    model_fault: ModelFault | None
    """Set by `finish` when the model's answer was delivered in another form than it came (`ModelFault`)."""

    def feed(self, chunk: dict[str, Any]) -> bytes:
        """One decoded upstream `chat.completion.chunk` (vLLM's: `prompt_token_ids` in the first, `delta.content`,
        `delta.tool_calls[{index, id, function: {name, arguments}}]`, `token_ids`, `finish_reason`, `stop_reason`)
        -> zero or more complete SSE events (bytes) to send now. Chunks carrying an `error` are not fed."""
        ...

    def finish(self) -> bytes:
        """The closing events: computed before the call is recorded (they are part of the recorded answer), sent
        only once it is. What the model wrote always closes validly (what the protocol cannot carry exactly is
        delivered otherwise, and `model_fault` says so); raises `gateway.capture.ProtocolError` only when the
        engine's stream breaks its own shapes: the forwarder then sends `error(...)` instead."""
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

    def to_chat(self, body: dict[str, Any], earlier: list[Any]) -> dict[str, Any]:
        """The chat-completions request (without `model`, `stream`, token-id and logprob flags: the forwarder sets
        them). `earlier` holds the turns of the conversation the answer `previous_id` names continues, oldest first
        (each the `continued` of one recorded call of its chain, the answer's own last); empty when `previous_id` is
        None."""
        ...

    def continued(self, body: dict[str, Any], response_raw: bytes | str) -> Any:
        """The turn this answered call (`body`, and `response_raw`, its answer as the harness saw it: JSON or SSE
        text) adds to its conversation for a later call that continues it (JSON-able: stored with the call, after
        its chain's turns, as the call's continuation); None when the protocol has no continuations (`previous_id`
        is always None)."""
        ...

    def answer_turn(self, response_raw: bytes | str) -> dict[str, Any] | None:
        """The chat assistant message an ok answer (as the harness saw it: JSON or SSE text) is when a harness sends it
        back as it came, as `to_chat` translates it (`gateway.recorded_turns` compares a re-sent turn with it); None
        when it is not one assistant message."""
        ...

    def from_chat(self, answer: dict[str, Any], body: dict[str, Any], response_id: str) -> dict[str, Any]:
        """The harness protocol's answer (with id `response_id`) built from the engine's non-streamed
        chat-completions answer (first choice; vLLM's shape: `message.content`, `message.tool_calls`,
        `finish_reason`, `stop_reason`, `prompt_token_ids`, `token_ids`, `usage`). What the model wrote is always
        translated (what the protocol cannot carry exactly, e.g. Anthropic tool-call arguments that are not a JSON
        object, is delivered otherwise: `model_fault`); raises `gateway.capture.ProtocolError` only for an answer off
        the engine's shapes: the forwarder records the call and answers 502."""
        ...

    def model_fault(self, answer: dict[str, Any]) -> ModelFault | None:
        """Whether `from_chat` of this engine answer delivers the model's answer otherwise than it came (and how),
        for the call's record; None when it is carried exactly."""
        ...

    def stream(self, body: dict[str, Any], response_id: str) -> StreamTranslator:
        """A translator for one streamed answer (with id `response_id`) to `body`."""
        ...

    def error_body(self, status: int, message: str, code: str | None) -> bytes:
        """An error in the protocol's own shape (Anthropic: `{"type": "error", "error": {...}}`), for any HTTP
        status the gateway answers (400, 401, 403, 404, 405, 409, 413, 429, 500, 502, 503) and `code`, the gateway's
        error code (e.g. `stale_attempt`, `upstream_unavailable`, `store_unavailable`)."""
        ...
