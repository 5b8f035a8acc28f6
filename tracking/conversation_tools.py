"""Tool calls and their results as a harness's conversation shows them, whatever its protocol; answers made readable.

A harness sends its whole context (or, on the Responses API with `previous_response_id`, the new items) with every
call: a tool call the model made in call k's answer comes back in call k+1's request together with the tool's
result. `tool_exchanges` reads those pairs from one request in the three shapes the gateway serves: chat completions
(`assistant.tool_calls` + `tool` messages), Anthropic Messages (`tool_use` + `tool_result` blocks) and OpenAI
Responses (`function_call` + `function_call_output` items). `readable_answer` turns a recorded answer into what the
harness saw: the JSON it got, or for a stream the text, the finish reason, the reassembled chat tool calls and the
raw SSE text. Token IDs and logprobs never appear in either.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

HIDDEN_KEYS = frozenset({"prompt_token_ids", "token_ids", "response_token_ids", "logprobs", "prompt_logprobs"})
"""Keys dropped from everything a trace shows: the gateway's store keeps token IDs and logprobs, traces do not."""


@dataclass(frozen=True)
class ToolExchange:
    """One tool call the model made and the result the harness sent back."""

    call_id: str
    """The tool call's id (chat `id`, Anthropic `tool_use.id`, Responses `call_id`)."""
    name: str
    """The tool's name."""
    arguments: Any
    """The arguments: parsed JSON when they are a JSON text, else as sent."""
    result: Any
    """The result as the harness sent it (text, or content parts); None when no result came back yet."""


def without_hidden(value: Any) -> Any:
    """`value` with every HIDDEN_KEYS entry removed, at any depth."""
    if isinstance(value, dict):
        return {key: without_hidden(item) for key, item in value.items() if key not in HIDDEN_KEYS}
    if isinstance(value, list):
        return [without_hidden(item) for item in value]
    return value


def parsed_arguments(arguments: Any) -> Any:
    """Tool-call arguments as JSON when they are a JSON text (chat and Responses send a string), else unchanged."""
    if isinstance(arguments, str):
        try:
            return json.loads(arguments)
        except ValueError:
            return arguments
    return arguments


def _chat_exchanges(messages: list[Any]) -> Iterator[ToolExchange]:
    results = {m.get("tool_call_id"): m.get("content") for m in messages
               if isinstance(m, dict) and m.get("role") == "tool"}
    for message in messages:
        if not isinstance(message, dict) or message.get("role") != "assistant":
            continue
        for call in message.get("tool_calls") or ():
            function = call.get("function") or {} if isinstance(call, dict) else {}
            call_id = str(call.get("id", "")) if isinstance(call, dict) else ""
            yield ToolExchange(call_id, str(function.get("name", "?")), parsed_arguments(function.get("arguments")),
                               results.get(call_id))


def _blocks(message: Any) -> list[dict[str, Any]]:
    content = message.get("content") if isinstance(message, dict) else None
    return [block for block in content if isinstance(block, dict)] if isinstance(content, list) else []


def _anthropic_exchanges(messages: list[Any]) -> Iterator[ToolExchange]:
    results = {block.get("tool_use_id"): block.get("content") for message in messages for block in _blocks(message)
               if block.get("type") == "tool_result"}
    for message in messages:
        for block in _blocks(message):
            if block.get("type") == "tool_use":
                call_id = str(block.get("id", ""))
                yield ToolExchange(call_id, str(block.get("name", "?")), block.get("input"), results.get(call_id))


def _responses_exchanges(items: list[Any]) -> Iterator[ToolExchange]:
    items = [item for item in items if isinstance(item, dict)]
    results = {item.get("call_id"): item.get("output") for item in items
               if str(item.get("type", "")).endswith("_call_output")}
    for item in items:
        kind = str(item.get("type", ""))
        if kind.endswith("_call") and "call_id" in item:
            call_id = str(item["call_id"])
            arguments = item.get("arguments", item.get("input", item.get("action")))
            yield ToolExchange(call_id, str(item.get("name", kind)), parsed_arguments(arguments), results.get(call_id))


def tool_exchanges(request: dict[str, Any]) -> list[ToolExchange]:
    """Every tool call in the conversation of `request` with its result, in conversation order."""
    messages = request.get("messages")
    if isinstance(messages, list):
        if any(block.get("type") in ("tool_use", "tool_result") for m in messages for block in _blocks(m)):
            return list(_anthropic_exchanges(messages))
        return list(_chat_exchanges(messages))
    items = request.get("input")
    if isinstance(items, list):
        return list(_responses_exchanges(items))
    return []


def sse_data(raw: str) -> Iterator[Any]:
    """The JSON payloads of an SSE text's `data:` lines (`[DONE]` and undecodable lines skipped)."""
    for line in raw.splitlines():
        if not line.startswith("data:"):
            continue
        payload = line[len("data:"):].strip()
        if payload and payload != "[DONE]":
            try:
                yield json.loads(payload)
            except ValueError:
                continue


def sse_without_hidden(raw: str) -> str:
    """An SSE text with HIDDEN_KEYS removed from every JSON `data:` payload (other lines as they are)."""
    lines = []
    for line in raw.splitlines():
        payload = line[len("data:"):].strip() if line.startswith("data:") else None
        if payload and payload != "[DONE]":
            with contextlib.suppress(ValueError):
                line = "data: " + json.dumps(without_hidden(json.loads(payload)), ensure_ascii=False)
        lines.append(line)
    return "\n".join(lines)


def chat_stream_tool_calls(raw: str) -> list[dict[str, Any]]:
    """The tool calls of a chat-completions stream's first choice, their argument fragments joined, by index."""
    calls: dict[int, dict[str, Any]] = {}
    for chunk in sse_data(raw):
        choices = chunk.get("choices") if isinstance(chunk, dict) else None
        for choice in choices or ():
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            for delta in (choice.get("delta") or {}).get("tool_calls") or ():
                if not isinstance(delta, dict):
                    continue
                entry = calls.setdefault(int(delta.get("index", 0)), {"id": None, "name": "", "arguments": ""})
                function = delta.get("function") or {}
                entry["id"] = delta.get("id") or entry["id"]
                entry["name"] += function.get("name") or ""
                entry["arguments"] += function.get("arguments") or ""
    return [{**entry, "arguments": parsed_arguments(entry["arguments"])} for _, entry in sorted(calls.items())]


def readable_answer(kind: str, stream: bool, response_raw: str | None, response_text: str | None,
                    finish_reason: str | None, max_raw_chars: int) -> Any:
    """The answer as the harness saw it: the parsed JSON of a unary answer (token IDs dropped); for a stream, its
    text, finish reason, reassembled tool calls (chat) and the raw SSE text (cut to `max_raw_chars`)."""
    if response_raw is None:
        return None
    if not stream:
        try:
            return without_hidden(json.loads(response_raw))
        except ValueError:
            return {"raw": response_raw[:max_raw_chars]}
    answer: dict[str, Any] = {"text": response_text, "finish_reason": finish_reason}
    if kind == "chat":
        tool_calls = chat_stream_tool_calls(response_raw)
        if tool_calls:
            answer["tool_calls"] = tool_calls
    answer["stream"] = sse_without_hidden(response_raw)[:max_raw_chars]
    return answer
