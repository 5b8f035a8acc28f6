"""Anthropic Messages request -> one chat-completions request (pure).

What the engine computes depends only on the messages, tools and sampling fields, so:
- translated: `system` (a string or text blocks) -> a system message; `messages` with string or block content
  (a `system` message among them stays a system message in place; `text`; `tool_use` -> assistant `tool_calls`,
  arguments as JSON; `tool_result` -> `role: tool` messages in block order, `is_error` marked by
  `TOOL_ERROR_PREFIX`); `tools` (name, description, input_schema) -> function tools;
  `tool_choice` auto/any/tool/none; `max_tokens`, `temperature`, `top_p`, `top_k`, `stop_sequences`;
- accepted and ignored (they do not change the tokens the engine computes): `metadata`, `cache_control` anywhere,
  `thinking` (the policy has no thinking mode: no thinking blocks are returned), `thinking` and `redacted_thinking`
  blocks in assistant turns (dropped: this gateway never returns them), `context_management` (no edit is applied:
  the engine sees the messages as sent), `output_config.effort`, `service_tier`, `speed`, `inference_geo`,
  `diagnostics`, `container`, `user_profile_id`, `workspace_id`, `mcp_servers` when empty, and per tool
  `cache_control`, `eager_input_streaming`, `strict: false`, `type: "custom"`; tools with `defer_loading: true` are
  left out of the prompt, as Anthropic leaves them out of the model's context;
- refused (400 naming the field): any other field, `image`/`document` and other blocks (the policy takes text only),
  server tools, `output_config.format`, `strict: true`, `input_examples`, `mcp_servers` not empty, a final assistant
  turn (prefill).
"""

from __future__ import annotations

import json
from typing import Any

from gateway.errors import BadRequest
from gateway.strict_json import is_integer

TOOL_ERROR_PREFIX = "Error: "  # how a tool_result with is_error=true reaches the model
TEXT_JOIN = "\n"  # text blocks of one turn are joined as vLLM joins text parts

TRANSLATED_FIELDS = frozenset({"model", "messages", "max_tokens", "system", "stream", "tools", "tool_choice",
                               "temperature", "top_p", "top_k", "stop_sequences"})
IGNORED_FIELDS = frozenset({"metadata", "cache_control", "thinking", "context_management", "service_tier", "speed",
                            "inference_geo", "diagnostics", "container", "user_profile_id", "workspace_id"})
CHECKED_FIELDS = frozenset({"output_config", "mcp_servers"})
KNOWN_FIELDS = TRANSLATED_FIELDS | IGNORED_FIELDS | CHECKED_FIELDS  # count_tokens takes them all: it counts the prompt
TOOL_IGNORED = frozenset({"cache_control", "eager_input_streaming", "defer_loading", "allowed_callers", "type"})
DROPPED_BLOCKS = frozenset({"thinking", "redacted_thinking"})


def check_fields(body: dict[str, Any], *, count_tokens: bool) -> None:
    """BadRequest naming the first top-level field the gateway cannot honour (`count_tokens`: `max_tokens` may be
    absent; sampling fields, which do not change the prompt, are accepted)."""
    for key in body:
        if key not in KNOWN_FIELDS:
            raise BadRequest(f"field {key!r} is not supported by this gateway: it would change what the model "
                             f"computes and cannot be honoured; remove it (supported: "
                             f"{', '.join(sorted(KNOWN_FIELDS))})", param=key)
    _typed(body, "model", str, required=True)
    if not isinstance(body.get("messages"), list) or not body["messages"]:
        raise BadRequest("'messages' must be a non-empty list of messages", param="messages")
    if not count_tokens:
        max_tokens = body.get("max_tokens")
        if not _is_int(max_tokens) or max_tokens < 1:
            raise BadRequest(f"'max_tokens' must be an integer >= 1, got {max_tokens!r}", param="max_tokens")
        _typed(body, "stream", bool)
    output_config = _typed(body, "output_config", dict) or {}
    for key, value in output_config.items():
        if key == "format" and value is not None:
            raise BadRequest("'output_config.format' (structured output) is not supported: the engine does not "
                             "constrain its output to a schema", param="output_config.format")
        if key not in ("effort", "format"):
            raise BadRequest(f"'output_config.{key}' is not supported", param=f"output_config.{key}")
    if body.get("mcp_servers"):
        raise BadRequest("'mcp_servers' is not supported: the gateway connects to no MCP server; send the tools "
                         "instead", param="mcp_servers")


def to_chat(body: dict[str, Any]) -> dict[str, Any]:
    """The chat-completions request for an Anthropic Messages request (checked by `check_fields`)."""
    messages = _system(body.get("system"))
    for i, message in enumerate(body["messages"]):
        messages.extend(_message(message, f"messages[{i}]"))
    if body["messages"][-1].get("role") == "assistant":
        last = f"messages[{len(body['messages']) - 1}]"
        raise BadRequest(f"{last} is a final assistant turn (prefill), which is not supported: end with a user turn",
                         param=last)
    chat: dict[str, Any] = {"messages": messages}
    translated = (_tool(tool, i) for i, tool in enumerate(_typed(body, "tools", list) or ()))
    tools = [tool for tool in translated if tool is not None]
    if tools:
        chat["tools"] = tools
    if body.get("tool_choice") is not None:
        chat.update(_tool_choice(body["tool_choice"]))
    _sampling(body, chat)
    return chat


def _sampling(body: dict[str, Any], chat: dict[str, Any]) -> None:
    if "max_tokens" in body:  # an integer, maybe written 8.0 (check_fields; count_tokens samples nothing)
        chat["max_tokens"] = int(body["max_tokens"]) if _is_int(body["max_tokens"]) else body["max_tokens"]
    for key in ("temperature", "top_p"):
        if body.get(key) is not None:
            chat[key] = _number(body[key], key)
    if body.get("top_k") is not None:
        if not _is_int(body["top_k"]):
            raise BadRequest(f"'top_k' must be an integer, got {body['top_k']!r}", param="top_k")
        chat["top_k"] = int(body["top_k"])
    stops = body.get("stop_sequences")
    if stops is not None:
        if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
            raise BadRequest("'stop_sequences' must be a list of strings", param="stop_sequences")
        if stops:
            chat["stop"] = stops


def _system(system: Any) -> list[dict[str, Any]]:
    if system is None:
        return []
    if isinstance(system, str):
        return [{"role": "system", "content": system}] if system else []
    if not isinstance(system, list):
        raise BadRequest("'system' must be a string or a list of text blocks", param="system")
    text = TEXT_JOIN.join(_text_block(block, f"system[{i}]") for i, block in enumerate(system))
    return [{"role": "system", "content": text}] if text else []


def _text_block(block: Any, where: str) -> str:
    if not isinstance(block, dict) or block.get("type") != "text":
        kind = block.get("type") if isinstance(block, dict) else type(block).__name__
        raise BadRequest(f"{where} must be a text block, got {kind!r}: the policy takes text only", param=where)
    if not isinstance(block.get("text"), str):
        raise BadRequest(f"{where}.text must be a string", param=f"{where}.text")
    return block["text"]


def _message(message: Any, where: str) -> list[dict[str, Any]]:
    if not isinstance(message, dict):
        raise BadRequest(f"{where} must be an object with 'role' and 'content'", param=where)
    role, content = message.get("role"), message.get("content")
    if role == "system":  # Claude Code (2.1.x) sends its environment as a system message inside `messages`
        if not isinstance(content, (str, list)):
            raise BadRequest(f"{where}.content must be a string or a list of text blocks", param=f"{where}.content")
        text = content if isinstance(content, str) else \
            TEXT_JOIN.join(_text_block(block, f"{where}.content[{k}]") for k, block in enumerate(content))
        return [{"role": "system", "content": text}]
    if role not in ("user", "assistant"):
        raise BadRequest(f"{where}.role must be 'user', 'assistant' or 'system', got {role!r}",
                         param=f"{where}.role")
    if isinstance(content, str):
        return [{"role": role, "content": content}]
    if not isinstance(content, list):
        raise BadRequest(f"{where}.content must be a string or a list of blocks", param=f"{where}.content")
    return _assistant(content, where) if role == "assistant" else _user(content, where)


def _user(blocks: list[Any], where: str) -> list[dict[str, Any]]:
    """User blocks in order: consecutive text blocks make one user message, each tool_result one tool message."""
    out: list[dict[str, Any]] = []
    texts: list[str] = []
    for j, block in enumerate(blocks):
        at = f"{where}.content[{j}]"
        if isinstance(block, dict) and block.get("type") == "tool_result":
            if texts:
                out.append({"role": "user", "content": TEXT_JOIN.join(texts)})
                texts = []
            out.append(_tool_result(block, at))
        else:
            texts.append(_text_block(block, at))
    if texts or not out:
        out.append({"role": "user", "content": TEXT_JOIN.join(texts)})
    return out


def _tool_result(block: dict[str, Any], where: str) -> dict[str, Any]:
    tool_use_id = block.get("tool_use_id")
    if not isinstance(tool_use_id, str) or not tool_use_id:
        raise BadRequest(f"{where}.tool_use_id must be a non-empty string", param=f"{where}.tool_use_id")
    content = block.get("content", "")
    if isinstance(content, list):
        content = TEXT_JOIN.join(_text_block(b, f"{where}.content[{k}]") for k, b in enumerate(content))
    elif content is None:
        content = ""
    elif not isinstance(content, str):
        raise BadRequest(f"{where}.content must be a string or a list of text blocks", param=f"{where}.content")
    if block.get("is_error"):
        content = TOOL_ERROR_PREFIX + content
    return {"role": "tool", "tool_call_id": tool_use_id, "content": content}


def _assistant(blocks: list[Any], where: str) -> list[dict[str, Any]]:
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for j, block in enumerate(blocks):
        at = f"{where}.content[{j}]"
        kind = block.get("type") if isinstance(block, dict) else None
        if kind in DROPPED_BLOCKS:
            continue
        if kind == "tool_use":
            calls.append(_tool_use(block, at))
        else:
            texts.append(_text_block(block, at))
    message: dict[str, Any] = {"role": "assistant", "content": TEXT_JOIN.join(texts)}
    if calls:
        message["tool_calls"] = calls
    return [message]


def assistant_message(blocks: list[Any]) -> dict[str, Any]:
    """The chat message of an assistant turn's blocks, as `to_chat` translates the turn when a harness sends it."""
    return _assistant(blocks, "answer")[0]


def _tool_use(block: dict[str, Any], where: str) -> dict[str, Any]:
    for key in ("id", "name"):
        if not isinstance(block.get(key), str) or not block[key]:
            raise BadRequest(f"{where}.{key} must be a non-empty string", param=f"{where}.{key}")
    if not isinstance(block.get("input"), dict):
        raise BadRequest(f"{where}.input must be an object", param=f"{where}.input")
    return {"id": block["id"], "type": "function",
            "function": {"name": block["name"], "arguments": dumps_arguments(block["input"])}}


def dumps_arguments(arguments: dict[str, Any]) -> str:
    """Tool-call arguments as JSON text, spaced as Python's json.dumps writes them (as Hermes-style models emit)."""
    return json.dumps(arguments, ensure_ascii=False)


def _tool(tool: Any, i: int) -> dict[str, Any] | None:
    where = f"tools[{i}]"
    if not isinstance(tool, dict):
        raise BadRequest(f"{where} must be an object", param=where)
    if tool.get("type") not in (None, "custom"):
        raise BadRequest(f"{where}.type {tool['type']!r} is a server tool: this gateway runs no server tools; send a "
                         "client tool with name, description and input_schema", param=f"{where}.type")
    for key in tool:
        if key not in ("name", "description", "input_schema", "strict", "input_examples") and key not in TOOL_IGNORED:
            raise BadRequest(f"{where}.{key} is not supported", param=f"{where}.{key}")
    if tool.get("strict"):
        raise BadRequest(f"{where}.strict=true is not supported: the engine does not constrain tool inputs to the "
                         "schema", param=f"{where}.strict")
    if tool.get("input_examples"):
        raise BadRequest(f"{where}.input_examples is not supported: the chat template has no place for them",
                         param=f"{where}.input_examples")
    if not isinstance(tool.get("name"), str) or not tool["name"]:
        raise BadRequest(f"{where}.name must be a non-empty string", param=f"{where}.name")
    if not isinstance(tool.get("input_schema"), dict):
        raise BadRequest(f"{where}.input_schema must be a JSON schema object", param=f"{where}.input_schema")
    if tool.get("defer_loading"):
        return None
    function: dict[str, Any] = {"name": tool["name"]}
    if tool.get("description") is not None:
        function["description"] = _typed(tool, "description", str, where=where)
    function["parameters"] = tool["input_schema"]
    return {"type": "function", "function": function}


def _tool_choice(choice: Any) -> dict[str, Any]:
    if not isinstance(choice, dict):
        raise BadRequest("'tool_choice' must be an object with 'type'", param="tool_choice")
    kind = choice.get("type")
    mapped: dict[str, Any]
    if kind == "auto":
        mapped = {"tool_choice": "auto"}
    elif kind == "any":
        mapped = {"tool_choice": "required"}
    elif kind == "none":
        mapped = {"tool_choice": "none"}
    elif kind == "tool" and isinstance(choice.get("name"), str):
        mapped = {"tool_choice": {"type": "function", "function": {"name": choice["name"]}}}
    else:
        raise BadRequest(f"'tool_choice.type' must be auto, any, none or tool (with a name), got {choice!r}",
                         param="tool_choice.type")
    if choice.get("disable_parallel_tool_use"):
        mapped["parallel_tool_calls"] = False
    return mapped


def _is_int(value: Any) -> bool:
    return is_integer(value)


def _number(value: Any, key: str) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value
    raise BadRequest(f"'{key}' must be a number, got {value!r}", param=key)


def _typed(body: dict[str, Any], key: str, kind: type, *, required: bool = False, where: str = "") -> Any:
    value = body.get(key)
    name = f"{where}.{key}" if where else key
    if value is None and not required:
        return None
    if not isinstance(value, kind):
        raise BadRequest(f"'{name}' must be a {kind.__name__}, got {value!r}"[:300], param=name)
    return value
