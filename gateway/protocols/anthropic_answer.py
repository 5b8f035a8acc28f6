"""The engine's chat-completions answer -> an Anthropic Messages answer, unary or as Anthropic's SSE events (pure).

Content: the text (when there is any, or when there is nothing else) as a `text` block, then one `tool_use` block
per tool call (`id` `toolu_<answer>_<i>`, `input` the parsed arguments). `stop_reason`: `tool_use` when the answer
has tool calls, `max_tokens` for finish `length`, `stop_sequence` (with `stop_sequence`) when vLLM's `stop_reason`
is one of the request's stop sequences, `refusal` for `content_filter`, else `end_turn`. `usage`: the engine's
prompt and response token counts, cache counts 0.

Stream: `message_start`, then per block `content_block_start`, `content_block_delta` (`text_delta`,
`input_json_delta`) and `content_block_stop` (a text block closes when a tool call starts, and each tool call when
the next begins), then, once the call is recorded, `message_delta` (stop reason, output tokens) and `message_stop`.
"""

from __future__ import annotations

from typing import Any

import orjson

from gateway.capture import ProtocolError


def tool_use_id(response_id: str, index: int) -> str:
    """The id of the `index`-th tool call of answer `response_id` (`msg_X` -> `toolu_X_<index>`)."""
    return f"toolu_{response_id.removeprefix('msg_')}_{index}"


def stop_reason(finish_reason: str | None, matched: Any, stops: list[str], has_tools: bool) -> tuple[str, str | None]:
    """(stop_reason, stop_sequence) for a chat finish reason and vLLM's `stop_reason` (the matched stop string)."""
    if has_tools or finish_reason == "tool_calls":
        return "tool_use", None
    if finish_reason == "length":
        return "max_tokens", None
    if finish_reason == "content_filter":
        return "refusal", None
    if isinstance(matched, str) and matched in stops:
        return "stop_sequence", matched
    return "end_turn", None


def usage(input_tokens: int, output_tokens: int) -> dict[str, int]:
    """Anthropic's usage object (no prompt cache: cache counts are 0)."""
    return {"input_tokens": input_tokens, "output_tokens": output_tokens, "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0}


def parse_arguments(text: str, where: str) -> dict[str, Any]:
    """Tool-call arguments (JSON text) as an object; ProtocolError otherwise ('' is {})."""
    if not text.strip():
        return {}
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        value = None
    if not isinstance(value, dict):
        raise ProtocolError(f"{where}: tool-call arguments are not a JSON object: {text[:200]!r}")
    return value


def _counts(answer: dict[str, Any], choice: dict[str, Any]) -> tuple[int, int]:
    use = answer.get("usage") if isinstance(answer.get("usage"), dict) else {}
    prompt = answer.get("prompt_token_ids")
    output = choice.get("token_ids")
    return (len(prompt) if isinstance(prompt, list) else int(use.get("prompt_tokens") or 0),
            len(output) if isinstance(output, list) else int(use.get("completion_tokens") or 0))


def from_chat(answer: dict[str, Any], body: dict[str, Any], response_id: str) -> dict[str, Any]:
    """The Anthropic message for a (non-streamed) chat-completions answer; ProtocolError when it has no choice or
    a tool call's arguments are not a JSON object."""
    choices = answer.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise ProtocolError("the answer has no choice to translate")
    choice = choices[0]
    message = choice.get("message") if isinstance(choice.get("message"), dict) else {}
    text = message.get("content") or ""
    calls = message.get("tool_calls") or []
    content: list[dict[str, Any]] = []
    if text or not calls:
        content.append({"type": "text", "text": text})
    for i, call in enumerate(calls):
        function = call.get("function") or {}
        content.append({"type": "tool_use", "id": tool_use_id(response_id, i), "name": function.get("name") or "",
                        "input": parse_arguments(function.get("arguments") or "", f"tool call {i}")})
    reason, sequence = stop_reason(choice.get("finish_reason"), choice.get("stop_reason"),
                                   body.get("stop_sequences") or [], bool(calls))
    return {"id": response_id, "type": "message", "role": "assistant", "model": body.get("model", ""),
            "content": content, "stop_reason": reason, "stop_sequence": sequence,
            "usage": usage(*_counts(answer, choice))}


def sse(event: str, data: dict[str, Any]) -> bytes:
    """One Anthropic SSE event."""
    return b"event: " + event.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


_TEXT_DELTA = (b'event: content_block_delta\ndata: {"type":"content_block_delta","index":',
               b',"delta":{"type":"text_delta","text":', b"}}\n\n")


def _text_delta(index: int, text: str) -> bytes:
    """`sse("content_block_delta", {..., "delta": {"type": "text_delta", "text": text}})`, byte for byte, without
    building the dict (one per streamed token)."""
    return b"".join((_TEXT_DELTA[0], str(index).encode(), _TEXT_DELTA[1], orjson.dumps(text), _TEXT_DELTA[2]))


class MessagesStream:
    """Chat-completions chunks -> Anthropic SSE events, for one streamed answer (see the module docstring)."""

    def __init__(self, body: dict[str, Any], response_id: str) -> None:
        self._body, self._id = body, response_id
        self._started = False
        self._input_tokens = self._output_tokens = 0
        self._blocks = 0  # content blocks opened so far
        self._open: tuple[str, int] | None = None  # ("text", -1) or ("tool", tool index) of the open block
        self._tool_block: dict[int, int] = {}  # tool-call index -> its content block index
        self._arguments: dict[int, list[str]] = {}
        self._finish: str | None = None
        self._matched: Any = None

    def feed(self, chunk: dict[str, Any]) -> bytes:
        out = [self._start(chunk)] if not self._started else []
        if isinstance(chunk.get("prompt_token_ids"), list):
            self._input_tokens = len(chunk["prompt_token_ids"])
        for choice in chunk.get("choices") or ():
            if isinstance(choice, dict) and choice.get("index", 0) == 0:
                out.append(self._choice(choice))
        return b"".join(out)

    def _start(self, chunk: dict[str, Any]) -> bytes:
        self._started = True
        prompt = chunk.get("prompt_token_ids")
        self._input_tokens = len(prompt) if isinstance(prompt, list) else 0
        message = {"id": self._id, "type": "message", "role": "assistant", "model": self._body.get("model", ""),
                   "content": [], "stop_reason": None, "stop_sequence": None,
                   "usage": usage(self._input_tokens, 0)}
        return sse("message_start", {"type": "message_start", "message": message})

    def _choice(self, choice: dict[str, Any]) -> bytes:
        if isinstance(choice.get("token_ids"), list):
            self._output_tokens += len(choice["token_ids"])
        if choice.get("finish_reason") is not None:
            self._finish, self._matched = choice["finish_reason"], choice.get("stop_reason")
        delta = choice.get("delta") if isinstance(choice.get("delta"), dict) else {}
        out: list[bytes] = []
        if delta.get("content"):
            if self._open != ("text", -1):
                out.append(self._begin(("text", -1), {"type": "text", "text": ""}))
            out.append(_text_delta(self._blocks - 1, delta["content"]))
        for call in delta.get("tool_calls") or ():
            out.append(self._tool_delta(call))
        return b"".join(out)

    def _tool_delta(self, call: dict[str, Any]) -> bytes:
        index = call.get("index", 0)
        function = call.get("function") or {}
        out: list[bytes] = []
        if index not in self._tool_block:
            block = {"type": "tool_use", "id": tool_use_id(self._id, len(self._tool_block)),
                     "name": function.get("name") or "", "input": {}}
            out.append(self._begin(("tool", index), block))
            self._tool_block[index] = self._blocks - 1
            self._arguments[index] = []
        if function.get("arguments"):
            self._arguments[index].append(function["arguments"])
            out.append(self._delta(self._tool_block[index],
                                   {"type": "input_json_delta", "partial_json": function["arguments"]}))
        return b"".join(out)

    def _begin(self, which: tuple[str, int], block: dict[str, Any]) -> bytes:
        closing = self._close()
        self._open = which
        self._blocks += 1
        return closing + sse("content_block_start", {"type": "content_block_start", "index": self._blocks - 1,
                                                     "content_block": block})

    def _close(self) -> bytes:
        if self._open is None:
            return b""
        self._open = None
        return sse("content_block_stop", {"type": "content_block_stop", "index": self._blocks - 1})

    @staticmethod
    def _delta(index: int, delta: dict[str, Any]) -> bytes:
        return sse("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})

    def finish(self) -> bytes:
        for index, parts in self._arguments.items():
            parse_arguments("".join(parts), f"tool call {index}")
        start = b"" if self._started else self._start({})
        reason, sequence = stop_reason(self._finish, self._matched, self._body.get("stop_sequences") or [],
                                       bool(self._tool_block))
        return start + self._close() + sse("message_delta", {
            "type": "message_delta", "delta": {"stop_reason": reason, "stop_sequence": sequence},
            "usage": {"output_tokens": self._output_tokens}}) + sse("message_stop", {"type": "message_stop"})

    def error(self, message: str, code: str) -> bytes:
        return sse("error", error_object(502 if code != "store_unavailable" else 503, message, code))


ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
               404: "not_found_error", 405: "invalid_request_error", 409: "invalid_request_error",
               413: "request_too_large", 429: "rate_limit_error", 503: "overloaded_error", 529: "overloaded_error"}


def error_object(status: int, message: str, code: str | None) -> dict[str, Any]:
    """Anthropic's error object for an HTTP status; the gateway's code ends the message in brackets."""
    kind = ERROR_TYPES.get(status, "invalid_request_error" if 400 <= status < 500 else "api_error")
    return {"type": "error", "error": {"type": kind, "message": f"{message} [{code}]" if code else message}}
