"""OpenAI Responses requests translated to chat completions (pure): top-level fields, input items, tools.

What each field becomes (anything not listed is refused with a 400 naming it):
- `instructions` -> the first system message (an earlier response's instructions are not carried over, as OpenAI
  documents for `previous_response_id`); `input` (a string, or items) -> messages: `message` items (roles user,
  assistant, system, developer -> system; text parts joined by a newline), consecutive `function_call` and
  `custom_tool_call` items -> one assistant message with parallel `tool_calls` (`call_id` kept; a custom call's
  `input` as the arguments `{"input": ...}`), `function_call_output` and `custom_tool_call_output` -> a `tool`
  message, `reasoning` items dropped (the model has no reasoning); images, files and audio refused (the model takes
  text only).
- `tools` of type `function` -> chat function tools (those inside a `namespace` tool too, under their own names;
  a call's `namespace` is restored in the answer); `custom` (free-form) tools, such as Codex's `apply_patch` -> a
  function tool of one string argument `input` (`custom_function`: the tool's format, a grammar or plain text, in that
  argument's description), a call of it answered as a `custom_tool_call` with that string as its `input`; the hosted
  and built-in types (`DROPPED_TOOL_TYPES`: web search, local shell, file search, ...) are dropped, as the policy can
  only call functions (Codex sends `web_search` with its function tools); `tool_choice`, `parallel_tool_calls`,
  `max_output_tokens` (-> `max_tokens`), `temperature`, `top_p`, `stop`, `text.format` (-> `response_format`)
  carried over.
- Accepted and ignored (`IGNORED`): fields that do not change what the model computes (`store`: the gateway records
  every call anyway; `include`, `prompt_cache_key`, `metadata`, `reasoning`: the model has no reasoning; ...).
"""

from __future__ import annotations

import json
from typing import Any

from gateway.errors import BadRequest
from gateway.strict_json import is_integer

HANDLED = frozenset({"model", "stream", "previous_response_id"})  # by the forwarder and the adapter
IGNORED = frozenset({
    "store", "include", "prompt_cache_key", "prompt_cache_retention",
    "metadata", "client_metadata", "reasoning", "service_tier", "user", "safety_identifier", "stream_options",
})
TRANSLATED = frozenset({
    "input", "instructions", "tools", "tool_choice", "parallel_tool_calls", "max_output_tokens", "temperature",
    "top_p", "stop", "text", "truncation", "top_logprobs", "background",
})
DROPPED_TOOL_TYPES = frozenset({
    "web_search", "web_search_preview", "web_search_preview_2025_03_11", "web_search_2025_08_26", "local_shell",
    "shell", "apply_patch", "file_search", "code_interpreter", "computer_use_preview", "computer",
    "image_generation", "mcp", "tool_search",
})
FIELD_TYPES = (("max_output_tokens", (int, float), "a positive integer"), ("temperature", (int, float), "a number"),
               ("top_p", (int, float), "a number"), ("stop", (str, list), "a string or a list of strings"),
               ("parallel_tool_calls", (bool,), "a boolean"))
TEXT_PARTS = frozenset({"input_text", "output_text", "text"})
MEDIA_PARTS = frozenset({"input_image", "input_file", "input_audio"})
MESSAGE_ROLES = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system"}
TOOL_CHOICE_OPTIONS = frozenset({"auto", "none", "required"})
CUSTOM_ARGUMENT = "input"
"""The one string argument of the function tool a `custom` tool is offered to the model as (named after the
`custom_tool_call`'s `input`, the text the harness gets)."""


def check_fields(body: dict[str, Any]) -> None:
    """Refuse a top-level field the gateway cannot honour (400 naming it); None counts as absent."""
    for key, value in body.items():
        if value is None or key in HANDLED or key in IGNORED:
            continue
        if key not in TRANSLATED:
            raise BadRequest(f"the gateway cannot honour the Responses field {key!r}: it would change the answer "
                             "and has no equivalent in the engine's chat completions; remove it", param=key)
    _check_value(body, "truncation", ("disabled",), "the gateway never truncates the input")
    _check_value(body, "background", (False,), "background responses need server-side state; call synchronously")
    _check_value(body, "top_logprobs", (0,), "alternatives per token are not returned on the Responses path")
    if not isinstance(body.get("input"), (str, list)):
        raise BadRequest("'input' must be a string or a list of input items", param="input")
    if not isinstance(body.get("instructions") or "", str):
        raise BadRequest("'instructions' must be a string", param="instructions")
    for key, types, what in FIELD_TYPES:
        value = body.get(key)
        if value is not None and (not isinstance(value, types) or isinstance(value, bool) != (bool in types)):
            raise BadRequest(f"'{key}' must be {what}, not {str(value)[:80]}", param=key)
    if body.get("max_output_tokens") is not None and not is_integer(body["max_output_tokens"]):
        raise BadRequest(f"'max_output_tokens' must be a positive integer, not {str(body['max_output_tokens'])[:80]}",
                         param="max_output_tokens")
    if body.get("max_output_tokens") is not None and body["max_output_tokens"] < 1:
        raise BadRequest("'max_output_tokens' must be a positive integer", param="max_output_tokens")
    stop = body.get("stop")
    if isinstance(stop, list) and not all(isinstance(s, str) for s in stop):
        raise BadRequest("'stop' must be a string or a list of strings", param="stop")


def _check_value(body: dict[str, Any], key: str, allowed: tuple[Any, ...], why: str) -> None:
    value = body.get(key)
    if value is not None and value not in allowed:
        raise BadRequest(f"{key}={value!r} is not supported ({why}); use {allowed[0]!r} or leave it out", param=key)


def chat_request(body: dict[str, Any], history: list[dict[str, Any]],
                 history_outputs: list[list[dict[str, Any]]]) -> dict[str, Any]:
    """The chat-completions request for `body`: instructions, then each earlier call's input and output items
    (oldest first), then this call's input."""
    messages: list[dict[str, Any]] = []
    if body.get("instructions"):
        messages.append({"role": "system", "content": body["instructions"]})
    for earlier, outputs in zip(history, history_outputs, strict=True):
        add_items(messages, as_items(earlier.get("input", [])), "previous_response_id")
        add_items(messages, outputs, "previous_response_id")
    add_items(messages, as_items(body["input"]), "input")
    if not messages:
        raise BadRequest("'input' is empty: there is nothing to answer", param="input")
    chat: dict[str, Any] = {"messages": messages}
    tools = chat_tools(body.get("tools"))
    if tools:
        chat["tools"] = tools
        chat["tool_choice"] = chat_tool_choice(body.get("tool_choice"), tools)
        if body.get("parallel_tool_calls") is not None:
            chat["parallel_tool_calls"] = bool(body["parallel_tool_calls"])
    elif body.get("tool_choice") not in (None, "auto", "none"):
        raise BadRequest(f"tool_choice={body['tool_choice']!r} names a tool, but the request has no function "
                         "tools the model can call", param="tool_choice")
    for source, target in (("max_output_tokens", "max_tokens"), ("temperature", "temperature"),
                           ("top_p", "top_p"), ("stop", "stop")):
        if body.get(source) is not None:
            chat[target] = body[source]
    if body.get("max_output_tokens") is not None:
        chat["max_tokens"] = int(body["max_output_tokens"])  # an integer (check_fields), maybe written 8.0
    response_format = chat_response_format(body.get("text"))
    if response_format is not None:
        chat["response_format"] = response_format
    return chat


def as_items(value: Any) -> list[Any]:
    """`input` as items: a string is one user message."""
    return [{"type": "message", "role": "user", "content": value}] if isinstance(value, str) else list(value)


def add_items(messages: list[dict[str, Any]], items: list[Any], where: str) -> None:
    """Append the chat messages of Responses items (BadRequest naming `where[i]` for an item it cannot take)."""
    for i, item in enumerate(items):
        at = f"{where}[{i}]"
        if not isinstance(item, dict):
            raise BadRequest(f"{at} must be an object, not {type(item).__name__}", param=at)
        kind = _name(item.get("type", "message"))
        if kind == "message":
            messages.append(_message(item, at))
        elif kind == "function_call":
            _add_function_call(messages, item, at)
        elif kind == "custom_tool_call":
            _add_custom_call(messages, item, at)
        elif kind in ("function_call_output", "custom_tool_call_output"):
            messages.append({"role": "tool", "tool_call_id": _text_field(item, "call_id", at),
                             "content": _content_text(item.get("output"), f"{at}.output")})
        elif kind != "reasoning":  # reasoning items are dropped: the model has no reasoning
            raise BadRequest(f"{at}.type={kind!r} is not supported: the gateway takes message, function_call, "
                             "function_call_output, custom_tool_call, custom_tool_call_output and reasoning items "
                             "(the model can only call function and custom tools; nothing is stored server-side for "
                             "item_reference)", param=f"{at}.type")


def sent_items(items: list[Any]) -> list[dict[str, Any]]:
    """Input items `add_items` took, as a conversation keeps them for a later call (`ResponsesAdapter.continued`):
    only what reaches the engine, which `add_items` translates as it translated them: `reasoning` items left out,
    each other item reduced to the fields its translation reads, a message's or an output's text parts joined.
    What the engine never saw (reasoning, ids, statuses, any field of the harness's own) is not stored with the
    answer, and so is not loaded again by each call that continues it."""
    kept: list[dict[str, Any]] = []
    for item in items:
        kind = _name(item.get("type", "message"))
        if kind == "message":
            kept.append({"type": kind, "role": item.get("role"),
                         "content": _content_text(item.get("content"), "input")})
        elif kind in ("function_call", "custom_tool_call"):
            field = "arguments" if kind == "function_call" else "input"
            kept.append({"type": kind, "call_id": item.get("call_id"), "name": item.get("name"),
                         field: item.get(field, "")})
        elif kind in ("function_call_output", "custom_tool_call_output"):
            kept.append({"type": kind, "call_id": item.get("call_id"),
                         "output": _content_text(item.get("output"), "output")})
    return kept


def _message(item: dict[str, Any], at: str) -> dict[str, Any]:
    role = MESSAGE_ROLES.get(_name(item.get("role")))
    if role is None:
        raise BadRequest(f"{at}.role={item.get('role')!r} is not one of {sorted(MESSAGE_ROLES)}", param=f"{at}.role")
    return {"role": role, "content": _content_text(item.get("content"), f"{at}.content")}


def _add_function_call(messages: list[dict[str, Any]], item: dict[str, Any], at: str) -> None:
    """A function call joins the assistant message just before it (parallel calls are one assistant turn)."""
    arguments = item.get("arguments", "")
    if not isinstance(arguments, str):
        raise BadRequest(f"{at}.arguments must be a JSON string", param=f"{at}.arguments")
    _join_call(messages, {"id": _text_field(item, "call_id", at), "type": "function",
                          "function": {"name": _text_field(item, "name", at), "arguments": arguments}})


def _add_custom_call(messages: list[dict[str, Any]], item: dict[str, Any], at: str) -> None:
    """A custom tool's call as the call of its function (`custom_function`): its `input` as that one argument."""
    text = item.get("input", "")
    if not isinstance(text, str):
        raise BadRequest(f"{at}.input must be a string", param=f"{at}.input")
    _join_call(messages, {"id": _text_field(item, "call_id", at), "type": "function",
                          "function": {"name": _text_field(item, "name", at),
                                       "arguments": custom_arguments(text)}})


def custom_arguments(text: str) -> str:
    """The function-call arguments (JSON, `json.dumps` spacing as the chat templates write them) of a custom call
    whose input is `text`."""
    return json.dumps({CUSTOM_ARGUMENT: text}, ensure_ascii=False)


def _join_call(messages: list[dict[str, Any]], call: dict[str, Any]) -> None:
    if messages and messages[-1]["role"] == "assistant":
        messages[-1].setdefault("tool_calls", []).append(call)
    else:
        messages.append({"role": "assistant", "content": "", "tool_calls": [call]})


def _name(value: Any) -> str | None:
    """A `type` or `role` value when it is a string (anything else matches no known name)."""
    return value if isinstance(value, str) else None


def _text_field(item: dict[str, Any], key: str, at: str) -> str:
    value = item.get(key)
    if not isinstance(value, str) or not value:
        raise BadRequest(f"{at}.{key} must be a non-empty string", param=f"{at}.{key}")
    return value


def _content_text(content: Any, at: str) -> str:
    """A string, or text parts joined by a newline (as vLLM joins a message's text parts)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise BadRequest(f"{at} must be a string or a list of content parts", param=at)
    texts = []
    for j, part in enumerate(content):
        kind = _name(part.get("type")) if isinstance(part, dict) else None
        if kind in TEXT_PARTS and isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif kind == "refusal" and isinstance(part.get("refusal"), str):
            texts.append(part["refusal"])
        elif kind in MEDIA_PARTS:
            raise BadRequest(f"{at}[{j}] is an {kind} part: the model takes text only; send text parts",
                             param=f"{at}[{j}].type")
        else:
            raise BadRequest(f"{at}[{j}] must be an input_text or output_text part with a string 'text', not "
                             f"{str(part)[:80]}", param=f"{at}[{j}]")
    return "\n".join(texts)


def chat_tools(tools: Any) -> list[dict[str, Any]]:
    """Function tools as chat tools, the functions of `namespace` tools among them under their own names (a call's
    namespace is restored in the answer: `tool_namespaces`); the types in DROPPED_TOOL_TYPES are left out (the model
    cannot call them). Two functions of one name are refused: the model could not tell them apart."""
    if tools is None:
        return []
    chat = _function_tools(tools, "tools")
    seen: set[str] = set()
    for tool in chat:
        name = tool["function"]["name"]
        if name in seen:
            raise BadRequest(f"two function tools are named {name!r} (namespaces included): the model calls "
                             "functions by name; rename one", param="tools")
        seen.add(name)
    return chat


def _function_tools(tools: Any, where: str) -> list[dict[str, Any]]:
    if not isinstance(tools, list):
        raise BadRequest(f"'{where}' must be a list", param=where)
    chat = []
    for i, tool in enumerate(tools):
        kind = _name(tool.get("type")) if isinstance(tool, dict) else None
        if kind in DROPPED_TOOL_TYPES:
            continue
        if kind == "namespace":
            chat.extend(_function_tools(tool.get("tools"), f"{where}[{i}].tools"))
            continue
        if kind == "custom" and isinstance(tool.get("name"), str):
            chat.append(custom_function(tool))
            continue
        if kind != "function" or not isinstance(tool.get("name"), str):
            raise BadRequest(f"{where}[{i}] of type {kind!r} is not supported: the model calls function tools "
                             f"(with a 'name', or in a namespace); hosted tools {sorted(DROPPED_TOOL_TYPES)} are "
                             "dropped", param=f"{where}[{i}]")
        function = {key: tool[key] for key in ("name", "description", "parameters", "strict")
                    if tool.get(key) is not None}
        chat.append({"type": "function", "function": function})
    return chat


def custom_function(tool: dict[str, Any]) -> dict[str, Any]:
    """A `custom` (free-form) tool as the chat function tool the model calls: one required string argument `input`
    whose description gives the tool's format (a grammar's syntax and definition, or plain text)."""
    fmt = tool.get("format") if isinstance(tool.get("format"), dict) else {}
    if fmt.get("type") == "grammar" and isinstance(fmt.get("definition"), str):
        shape = (f"Free-form text (not JSON), the whole input of the tool, following this {fmt.get('syntax', '')} "
                 f"grammar:\n{fmt['definition']}")
    else:
        shape = "Free-form text (not JSON), the whole input of the tool."
    function: dict[str, Any] = {"name": tool["name"]}
    if isinstance(tool.get("description"), str):
        function["description"] = tool["description"]
    function["parameters"] = {"type": "object", "properties": {CUSTOM_ARGUMENT: {"type": "string",
                                                                                "description": shape}},
                              "required": [CUSTOM_ARGUMENT], "additionalProperties": False}
    return {"type": "function", "function": function}


def custom_tool_names(tools: Any) -> frozenset[str]:
    """The names of the `custom` tools offered (top level or in a namespace): their calls are answered as
    `custom_tool_call` items."""
    found: set[str] = set()
    for tool in tools if isinstance(tools, list) else ():
        if not isinstance(tool, dict):
            continue
        if tool.get("type") == "custom" and isinstance(tool.get("name"), str):
            found.add(tool["name"])
        elif tool.get("type") == "namespace":
            found |= custom_tool_names(tool.get("tools"))
    return frozenset(found)


def tool_namespaces(tools: Any) -> dict[str, str]:
    """The namespace of each function offered inside a `namespace` tool, by function name."""
    found: dict[str, str] = {}
    for tool in tools if isinstance(tools, list) else ():
        if isinstance(tool, dict) and tool.get("type") == "namespace" and isinstance(tool.get("tools"), list):
            found.update({inner["name"]: tool.get("name") for inner in tool["tools"]
                          if isinstance(inner, dict) and isinstance(inner.get("name"), str)})
    return found


def chat_tool_choice(choice: Any, tools: list[dict[str, Any]]) -> Any:
    """`auto`/`none`/`required`, or one function by name (which must be among the tools)."""
    if choice is None or (isinstance(choice, str) and choice in TOOL_CHOICE_OPTIONS):
        return choice or "auto"
    if isinstance(choice, dict) and choice.get("type") == "function" and isinstance(choice.get("name"), str):
        if all(tool["function"]["name"] != choice["name"] for tool in tools):
            raise BadRequest(f"tool_choice names the function {choice['name']!r}, which is not among the tools",
                             param="tool_choice")
        return {"type": "function", "function": {"name": choice["name"]}}
    raise BadRequest(f"tool_choice={choice!r} is not supported: use auto, none, required or "
                     "{'type': 'function', 'name': ...}", param="tool_choice")


def chat_response_format(text: Any) -> dict[str, Any] | None:
    """`text.format` as chat's `response_format` (plain text: none); `text.verbosity` is ignored."""
    if text is None:
        return None
    fmt = text.get("format") if isinstance(text, dict) else text
    if fmt is None:
        return None
    kind = _name(fmt.get("type")) if isinstance(fmt, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "json_object"}
    if kind == "json_schema":
        schema = {key: fmt[key] for key in ("name", "schema", "strict", "description") if key in fmt}
        return {"type": "json_schema", "json_schema": schema}
    raise BadRequest(f"text.format={str(fmt)[:80]} is not supported: use text, json_object or json_schema",
                     param="text.format")
