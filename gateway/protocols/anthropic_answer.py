"""The engine's chat-completions answer -> an Anthropic Messages answer, unary or as Anthropic's SSE events (pure).

Content: the text (when there is any, or when there is nothing else) as a `text` block, then one `tool_use` block
per tool call (`id` `toolu_<answer>_<i>`, `input` the parsed arguments). A tool call whose arguments are not a JSON
object (the model's answer, which `tool_use.input` cannot carry) is a `text` block holding the call with its
arguments as a string (`call_as_text`), never an error; the call records it (`ModelFault`, code
`model_tool_arguments`). `stop_reason`: `tool_use` when the answer has tool_use blocks, `max_tokens` for finish
`length`, `stop_sequence` (with `stop_sequence`) when vLLM's `stop_reason` is one of the request's stop sequences,
`refusal` for `content_filter`, else `end_turn` (also for finish `tool_calls` whose calls were all answered as
text). `usage`: the engine's prompt and response token counts, cache counts 0.

Stream: `message_start`, then per block `content_block_start`, `content_block_delta` (`text_delta`,
`input_json_delta`) and `content_block_stop`. Text streams as it comes until the first tool call; from there on the
answer is held (a tool call's block depends on its whole arguments, and `input_json_delta`s once sent cannot be taken
back) and its blocks go out with the closing events, once the call is recorded: each held block whole (one delta),
then `message_delta` (stop reason, output tokens) and `message_stop`.
"""

from __future__ import annotations

from typing import Any

import orjson

from gateway.capture import ProtocolError
from gateway.protocols.base import ModelFault
from gateway.records import CallErrorCode


def tool_use_id(response_id: str, index: int) -> str:
    """The id of the `index`-th tool call of answer `response_id` (`msg_X` -> `toolu_X_<index>`)."""
    return f"toolu_{response_id.removeprefix('msg_')}_{index}"


def stop_reason(finish_reason: str | None, matched: Any, stops: list[str], has_tools: bool) -> tuple[str, str | None]:
    """(stop_reason, stop_sequence) for a chat finish reason and vLLM's `stop_reason` (the matched stop string)."""
    if has_tools:
        return "tool_use", None
    if finish_reason == "tool_calls":  # every call was answered as text (`tool_block`): the turn ends
        return "end_turn", None
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


def arguments_object(text: str) -> dict[str, Any] | None:
    """Tool-call arguments (JSON text) as an object ('' is {}); None when they are not a JSON object (what the model
    wrote: not the engine's failure)."""
    if not text.strip():
        return {}
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def call_as_text(name: str, arguments: str) -> str:
    """A tool call the protocol cannot carry (its arguments are not a JSON object), as the text the harness gets
    instead: the call with its arguments as a string."""
    return orjson.dumps({"name": name, "arguments": arguments}).decode()


def tool_block(name: Any, arguments: Any, block_id: str, index: int) -> tuple[dict[str, Any], str | None]:
    """(the content block of the answer's `index`-th tool call, why it is text or None): a `tool_use` block with its
    parsed input, or, when its arguments are not a JSON object, a `text` block holding the call (`call_as_text`).
    ProtocolError when the engine's call is off the chat shapes (a name or arguments that are not strings)."""
    if not isinstance(name, str) or not isinstance(arguments, str):
        raise ProtocolError(f"tool call {index}: name and arguments must be strings, got {name!r:.80}, "
                            f"{arguments!r:.80}")
    parsed = arguments_object(arguments)
    if parsed is not None:
        return {"type": "tool_use", "id": block_id, "name": name, "input": parsed}, None
    fault = (f"tool call {index} ({name!r:.80}): arguments are not a JSON object: {arguments[:200]!r}; answered as "
             "a text block holding the call")
    return {"type": "text", "text": call_as_text(name, arguments)}, fault


def model_fault(faults: list[str]) -> ModelFault | None:
    """The call's `ModelFault` for the tool calls answered as text (None when there are none)."""
    return ModelFault(CallErrorCode.MODEL_TOOL_ARGUMENTS, "; ".join(faults)) if faults else None


def _counts(answer: dict[str, Any], choice: dict[str, Any]) -> tuple[int, int]:
    use = answer.get("usage") if isinstance(answer.get("usage"), dict) else {}
    prompt = answer.get("prompt_token_ids")
    output = choice.get("token_ids")
    return (len(prompt) if isinstance(prompt, list) else int(use.get("prompt_tokens") or 0),
            len(output) if isinstance(output, list) else int(use.get("completion_tokens") or 0))


def _first_message(answer: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    choices = answer.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise ProtocolError("the answer has no choice to translate")
    choice = choices[0]
    return choice, choice.get("message") if isinstance(choice.get("message"), dict) else {}


def content_of(message: dict[str, Any], response_id: str) -> tuple[list[dict[str, Any]], list[str]]:
    """(the content blocks of a chat message, the faults of the tool calls answered as text): its text (when there is
    any, or nothing else), then a block per tool call (`tool_block`)."""
    text = message.get("content") or ""
    calls = message.get("tool_calls") or []
    if not isinstance(calls, list) or not all(isinstance(call, dict) for call in calls):
        raise ProtocolError(f"the answer's tool_calls must be a list of objects, got {str(calls)[:120]}")
    content: list[dict[str, Any]] = [{"type": "text", "text": text}] if text or not calls else []
    faults: list[str] = []
    for i, call in enumerate(calls):
        function = call.get("function") if isinstance(call.get("function"), dict) else {}
        block, fault = tool_block(function.get("name") or "", function.get("arguments") or "",
                                  tool_use_id(response_id, i), i)
        content.append(block)
        faults += [fault] if fault else []
    return content, faults


def recorded_content(response_raw: bytes | str) -> list[dict[str, Any]]:
    """The content blocks of an answer as the harness saw it: the message's `content`, or for a stream the blocks its
    `content_block_*` events built (text deltas joined, a tool_use block's `input_json_delta`s parsed)."""
    raw = response_raw.encode() if isinstance(response_raw, str) else response_raw
    if raw.lstrip().startswith(b"{"):
        return list(orjson.loads(raw).get("content") or [])
    blocks: list[dict[str, Any]] = []
    partial: dict[int, list[str]] = {}
    texts: dict[int, list[str]] = {}  # text deltas by block, joined at the end (adding to a string was quadratic)
    for line in raw.split(b"\n"):
        if not line.startswith(b"data:"):
            continue
        event = orjson.loads(line[5:])
        if event.get("type") == "content_block_start":
            blocks.append(dict(event["content_block"]))
        elif event.get("type") == "content_block_delta":
            delta = event["delta"]
            if delta.get("type") == "text_delta":
                texts.setdefault(event["index"], [blocks[event["index"]]["text"]]).append(delta["text"])
            elif delta.get("type") == "input_json_delta":
                partial.setdefault(event["index"], []).append(delta["partial_json"])
    for index, parts in texts.items():
        blocks[index]["text"] = "".join(parts)
    for index, parts in partial.items():
        blocks[index]["input"] = orjson.loads("".join(parts))
    return blocks


def from_chat(answer: dict[str, Any], body: dict[str, Any], response_id: str) -> dict[str, Any]:
    """The Anthropic message for a (non-streamed) chat-completions answer; ProtocolError when it has no choice or
    is off the chat shapes. A tool call whose arguments are not a JSON object is the model's answer: a text block."""
    choice, message = _first_message(answer)
    content, _ = content_of(message, response_id)
    has_tools = any(block["type"] == "tool_use" for block in content)
    reason, sequence = stop_reason(choice.get("finish_reason"), choice.get("stop_reason"),
                                   body.get("stop_sequences") or [], has_tools)
    return {"id": response_id, "type": "message", "role": "assistant", "model": body.get("model", ""),
            "content": content, "stop_reason": reason, "stop_sequence": sequence,
            "usage": usage(*_counts(answer, choice))}


def answer_fault(answer: dict[str, Any]) -> ModelFault | None:
    """The `ModelFault` of `from_chat(answer, ...)`: its tool calls answered as text, if any."""
    _, message = _first_message(answer)
    return model_fault(content_of(message, "msg_")[1])


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
        self._blocks = 0  # content blocks sent so far
        self._text_open = False  # a text block is open (streamed live)
        self._held: list[list[Any]] = []  # after the first tool call: ["text", [parts]] or ["tool", index], in order
        self._calls: dict[int, list[Any]] = {}  # tool-call index -> [name, [argument parts]]
        self._finish: str | None = None
        self._matched: Any = None
        self.model_fault: ModelFault | None = None

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
            out.append(self._text(delta["content"]))
        for call in delta.get("tool_calls") or ():
            out.append(self._tool_delta(call))
        return b"".join(out)

    def _text(self, text: str) -> bytes:
        """Text streams live until the first tool call; after it, it is held and sent in order at the end."""
        if self._calls:
            if not self._held or self._held[-1][0] != "text":
                self._held.append(["text", []])
            self._held[-1][1].append(text)
            return b""
        start = b""
        if not self._text_open:
            self._text_open = True
            start = self._block_start({"type": "text", "text": ""})
        return start + _text_delta(self._blocks - 1, text)

    def _tool_delta(self, call: dict[str, Any]) -> bytes:
        """A tool call is held whole until the answer ends (its arguments decide its block: `tool_block`); the first
        one closes the live text block."""
        closing = self._close_text()
        index = call.get("index", 0)
        function = call.get("function") or {}
        if index not in self._calls:
            self._calls[index] = ["", []]
            self._held.append(["tool", index])
        held = self._calls[index]
        held[0] = held[0] or function.get("name") or ""
        if function.get("arguments"):
            held[1].append(function["arguments"])
        return closing

    def _block_start(self, block: dict[str, Any]) -> bytes:
        self._blocks += 1
        return sse("content_block_start", {"type": "content_block_start", "index": self._blocks - 1,
                                           "content_block": block})

    def _block_stop(self) -> bytes:
        return sse("content_block_stop", {"type": "content_block_stop", "index": self._blocks - 1})

    def _close_text(self) -> bytes:
        if not self._text_open:
            return b""
        self._text_open = False
        return self._block_stop()

    @staticmethod
    def _delta(index: int, delta: dict[str, Any]) -> bytes:
        return sse("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})

    def _held_blocks(self) -> tuple[bytes, bool]:
        """(the held text and tool-call blocks as events, whether any is a tool_use); sets `model_fault`."""
        out: list[bytes] = []
        faults: list[str] = []
        has_tools, order = False, 0
        for kind, held in self._held:
            if kind == "text":
                out += [self._block_start({"type": "text", "text": ""}), _text_delta(self._blocks - 1, "".join(held)),
                        self._block_stop()]
                continue
            name, parts = self._calls[held]
            block, fault = tool_block(name, "".join(parts), tool_use_id(self._id, order), order)
            order += 1
            faults += [fault] if fault else []
            has_tools = has_tools or block["type"] == "tool_use"
            out.append(self._block_start({**block, "input": {}} if block["type"] == "tool_use" else
                                         {"type": "text", "text": ""}))
            if block["type"] == "tool_use" and "".join(parts).strip():
                out.append(self._delta(self._blocks - 1, {"type": "input_json_delta", "partial_json": "".join(parts)}))
            elif block["type"] == "text":
                out.append(_text_delta(self._blocks - 1, block["text"]))
            out.append(self._block_stop())
        self.model_fault = model_fault(faults)
        return b"".join(out), has_tools

    def finish(self) -> bytes:
        start = b"" if self._started else self._start({})
        closing = self._close_text()
        held, has_tools = self._held_blocks()
        reason, sequence = stop_reason(self._finish, self._matched, self._body.get("stop_sequences") or [], has_tools)
        return start + closing + held + sse("message_delta", {
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
