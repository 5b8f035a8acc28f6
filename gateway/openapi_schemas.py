"""JSON schemas of the harness routes' request bodies, as the gateway accepts them (OpenAPI 3.1 components).

Each describes what its parser takes (`proxy.parse_request` with `sampling.apply_policy` for chat and completions,
`protocols/anthropic_request.py` for Messages and count_tokens, `protocols/responses_request.py` for Responses): the
required fields, the types, the values refused (a negative temperature, `n` past the recorded choices, Anthropic's
and Responses' unknown fields, the chat and completions fields `request_fields.FIELDS` refuses: typed null here, as
null counts as absent). Chat and completions accept other fields (`additionalProperties`) and forward only those the
table forwards. What a schema cannot say, and the gateway still refuses with a 400 naming it: a Messages
conversation ending with an assistant turn (prefill), a Responses `tool_choice` naming no offered function, two
functions of one name, an input that holds no message, a `previous_response_id` that is not an answer of the same
rollout attempt, and anywhere a value the store cannot keep exactly (`strict_json`: an integer past 64 bits).
"""

from __future__ import annotations

from typing import Any

from gateway.capture import MAX_CHOICES
from gateway.protocols import anthropic_request, responses_request
from gateway.records import EventKind
from gateway.request_fields import CHAT, COMPLETION, ENGINE_DEFAULTS, REFUSED

Schema = dict[str, Any]
MAX_TOKENS = 2**31 - 1  # token counts are 32-bit on every engine
STRING: Schema = {"type": "string"}
BOOLEAN: Schema = {"type": "boolean"}
OBJECT: Schema = {"type": "object"}
STRINGS: Schema = {"type": "array", "items": STRING}


def _object(properties: dict[str, Schema], required: tuple[str, ...] = (), *, extra: bool = True,
            description: str | None = None) -> Schema:
    schema: Schema = {"type": "object", "properties": properties, "additionalProperties": extra}
    if required:
        schema["required"] = list(required)
    if description:
        schema["description"] = description
    return schema


def _integer(minimum: int, maximum: int = MAX_TOKENS) -> Schema:
    return {"type": "integer", "minimum": minimum, "maximum": maximum}


def _array(items: Schema, *, min_items: int = 0) -> Schema:
    return {"type": "array", "items": items, **({"minItems": min_items} if min_items else {})}


def _one_of(*schemas: Schema) -> Schema:
    return {"anyOf": list(schemas)}


def _const(value: Any) -> Schema:
    return {"enum": [value]}


SAMPLING: dict[str, Schema] = {  # gateway/sampling.py checks their types; the engine their ranges
    "temperature": {"type": "number", "minimum": 0, "description": "0 is greedy; a train rollout's calls sample at "
                    "the policy's temperature whatever is sent (gateway config `sampling`)."},
    "top_p": {"type": "number"}, "top_k": _integer(-1), "min_p": {"type": "number"},
    "frequency_penalty": {"type": "number"}, "presence_penalty": {"type": "number"},
    "repetition_penalty": {"type": "number"},
    "logit_bias": {"type": "object", "additionalProperties": {"type": "number"}},
}
OPENAI_COMMON: dict[str, Schema] = {
    "model": {"type": "string", "pattern": "^[^\\u0000]*$",
              "description": "A registered model, an alias, or any name when one model is registered (gateway "
              "config model_aliases / default_model); no NUL character (400, param `model`)."},
    "stream": BOOLEAN, "stream_options": OBJECT, "max_tokens": _integer(1), "n": _integer(1, MAX_CHOICES),
    "stop": _one_of(STRING, STRINGS), "seed": _integer(-(2**63), 2**63 - 1), "user": STRING, **SAMPLING,
}


def _refused(kind: str) -> dict[str, Schema]:
    """The fields the gateway refuses on route `kind` (400 naming the field): null (absent) or the engines'
    default, which asks for nothing and is dropped."""
    defaults = ENGINE_DEFAULTS[kind]
    return {key: {"enum": [None, defaults[key]]} if key in defaults else {"type": "null"} for key in REFUSED[kind]}


def chat_completion() -> Schema:
    """POST /r/{id}/v1/chat/completions: a non-empty list of messages; other fields go to the engine as sent."""
    part = _object({"type": STRING, "text": STRING}, ("type",))
    call = _object({"id": STRING, "type": _const("function"),
                    "function": _object({"name": STRING, "arguments": STRING}, ("name", "arguments"))},
                   ("id", "function"))
    message = _object({"role": {"enum": ["system", "developer", "user", "assistant", "tool"]},
                       "content": _one_of(STRING, _array(part), {"type": "null"}), "name": STRING,
                       "tool_calls": _array(call), "tool_call_id": STRING}, ("role",))
    tool = _object({"type": _const("function"), "function": _object(
        {"name": STRING, "description": STRING, "parameters": OBJECT, "strict": BOOLEAN}, ("name",))},
        ("type", "function"))
    choice = _one_of({"enum": ["none", "auto", "required"]},
                     _object({"type": _const("function"), "function": _object({"name": STRING}, ("name",))},
                             ("type", "function")))
    return _object({**_refused(CHAT), **OPENAI_COMMON, "messages": _array(message, min_items=1), "tools": _array(tool),
                    "tool_choice": choice, "parallel_tool_calls": BOOLEAN, "response_format": OBJECT,
                    "logprobs": BOOLEAN, "top_logprobs": _integer(0, 20), "max_completion_tokens": _integer(1)},
                   ("messages",), description="OpenAI chat completions; token IDs and (train) logprobs are forced.")


def completion() -> Schema:
    """POST /r/{id}/v1/completions: a prompt (text, texts, token IDs or lists of them)."""
    ids = _array(_integer(0, 2**31 - 1), min_items=1)
    prompt = _one_of(STRING, _array(STRING, min_items=1), ids, _array(ids, min_items=1))
    return _object({**_refused(COMPLETION), **OPENAI_COMMON, "prompt": prompt, "logprobs": _integer(0, 20)},
                   ("prompt",), description="OpenAI completions; token IDs and (train) logprobs are forced.")


def _anthropic_blocks() -> tuple[Schema, Schema, Schema, Schema]:
    """Anthropic's text, tool_result, tool_use and (dropped) thinking blocks."""
    text = _object({"type": _const("text"), "text": STRING, "cache_control": OBJECT}, ("type", "text"))
    result = _object({"type": _const("tool_result"), "tool_use_id": {"type": "string", "minLength": 1},
                      "content": _one_of(STRING, _array(text)), "is_error": BOOLEAN, "cache_control": OBJECT},
                     ("type", "tool_use_id"))
    use = _object({"type": _const("tool_use"), "id": {"type": "string", "minLength": 1},
                   "name": {"type": "string", "minLength": 1}, "input": OBJECT, "cache_control": OBJECT},
                  ("type", "id", "name", "input"))
    thinking = _object({"type": {"enum": sorted(anthropic_request.DROPPED_BLOCKS)}}, ("type",))
    return text, result, use, thinking


def _anthropic_messages() -> Schema:
    text, result, use, thinking = _anthropic_blocks()
    user = _object({"role": _const("user"), "content": _one_of(STRING, _array(_one_of(text, result)))},
                   ("role", "content"))
    assistant = _object({"role": _const("assistant"), "content": _one_of(STRING, _array(_one_of(text, use,
                                                                                                thinking)))},
                        ("role", "content"))
    system = _object({"role": _const("system"), "content": _one_of(STRING, _array(text))}, ("role", "content"))
    return {**_array(_one_of(user, assistant, system), min_items=1),
            "description": "The conversation; it must end with a user turn (a final assistant turn, prefill, is "
                           "refused). A system message among them stays one, in place (Claude Code sends one)."}


def _anthropic_tool() -> Schema:
    return _object({"name": {"type": "string", "minLength": 1}, "description": STRING, "input_schema": OBJECT,
                    "type": _const("custom"), "strict": _const(False), "input_examples": {"type": "array",
                                                                                           "maxItems": 0},
                    "cache_control": OBJECT, "eager_input_streaming": BOOLEAN, "defer_loading": BOOLEAN,
                    "allowed_callers": STRINGS}, ("name", "input_schema"), extra=False)


def anthropic_messages(*, count: bool) -> Schema:
    """POST /r/{id}/v1/messages (and .../count_tokens: `count`, max_tokens optional); unknown fields refused."""
    text = _anthropic_blocks()[0]
    choice = _one_of(_object({"type": {"enum": ["auto", "any", "none"]}, "disable_parallel_tool_use": BOOLEAN},
                             ("type",)),
                     _object({"type": _const("tool"), "name": STRING, "disable_parallel_tool_use": BOOLEAN},
                             ("type", "name")))
    properties: dict[str, Schema] = {
        "model": OPENAI_COMMON["model"], "messages": _anthropic_messages(), "max_tokens": _integer(1),
        "system": _one_of(STRING, _array(text)), "stream": BOOLEAN, "tools": _array(_anthropic_tool()),
        "tool_choice": choice, "temperature": SAMPLING["temperature"], "top_p": {"type": "number"},
        "top_k": _integer(-1), "stop_sequences": STRINGS,
        "output_config": _object({"effort": STRING, "format": {"type": "null"}}, extra=False),
        "mcp_servers": {"type": "array", "maxItems": 0},
        "metadata": OBJECT, "cache_control": OBJECT, "thinking": OBJECT, "context_management": OBJECT,
        "service_tier": STRING, "speed": STRING, "inference_geo": STRING, "diagnostics": OBJECT,
        "container": STRING, "user_profile_id": STRING, "workspace_id": STRING,
    }
    required = ("model", "messages") if count else ("model", "messages", "max_tokens")
    return _object(properties, required, extra=False, description="Anthropic Messages, translated to the engine's "
                   "chat completions (gateway/README.md lists what is translated, ignored and refused).")


def _responses_items() -> Schema:
    text_part = _object({"type": {"enum": sorted(responses_request.TEXT_PARTS)}, "text": STRING}, ("type", "text"))
    content = _one_of(STRING, _array(_one_of(text_part, _object({"type": _const("refusal"), "refusal": STRING},
                                                                 ("type", "refusal")))))
    message = _object({"type": _const("message"), "role": {"enum": sorted(responses_request.MESSAGE_ROLES)},
                       "content": content, "id": STRING, "status": STRING}, ("role", "content"))
    call = _object({"type": _const("function_call"), "call_id": {"type": "string", "minLength": 1},
                    "name": {"type": "string", "minLength": 1}, "arguments": STRING, "id": STRING,
                    "namespace": STRING}, ("type", "call_id", "name"))
    output = _object({"type": _const("function_call_output"), "call_id": {"type": "string", "minLength": 1},
                      "output": content, "id": STRING}, ("type", "call_id", "output"))
    custom_call = _object({"type": _const("custom_tool_call"), "call_id": {"type": "string", "minLength": 1},
                           "name": {"type": "string", "minLength": 1}, "input": STRING, "id": STRING,
                           "status": STRING}, ("type", "call_id", "name"))
    custom_output = _object({"type": _const("custom_tool_call_output"), "call_id": {"type": "string", "minLength": 1},
                             "output": content, "id": STRING}, ("type", "call_id", "output"))
    reasoning = _object({"type": _const("reasoning")}, ("type",))
    return _one_of(message, call, output, custom_call, custom_output, reasoning)


def _responses_tools() -> Schema:
    function = _object({"type": _const("function"), "name": {"type": "string", "minLength": 1},
                        "description": STRING, "parameters": OBJECT, "strict": BOOLEAN}, ("type", "name"))
    namespace = _object({"type": _const("namespace"), "name": STRING, "tools": _array(function)},
                        ("type", "tools"))
    custom = _object({"type": _const("custom"), "name": {"type": "string", "minLength": 1}, "description": STRING,
                      "format": OBJECT}, ("type", "name"))
    hosted = _object({"type": {"enum": sorted(responses_request.DROPPED_TOOL_TYPES)}}, ("type",))
    return _array(_one_of(function, namespace, custom, hosted))


def responses() -> Schema:
    """POST /r/{id}/v1/responses; unknown fields refused."""
    fmt = _one_of(_object({"type": {"enum": ["text", "json_object"]}}, ("type",)),
                  _object({"type": _const("json_schema"), "name": STRING, "schema": OBJECT, "strict": BOOLEAN,
                           "description": STRING}, ("type",)))
    choice = _one_of({"enum": sorted(responses_request.TOOL_CHOICE_OPTIONS)},
                     _object({"type": _const("function"), "name": STRING}, ("type", "name")))
    properties: dict[str, Schema] = {
        "model": OPENAI_COMMON["model"], "stream": BOOLEAN,
        "previous_response_id": {"type": "string", "description": "An answer of this rollout attempt (400 "
                                 "otherwise): its input and output items are prepended."},
        "input": _one_of(STRING, {**_array(_responses_items(), min_items=1), "description": "Items; at least one "
                                  "message, call or output unless instructions are given."}),
        "instructions": STRING, "tools": _responses_tools(), "tool_choice": choice,
        "parallel_tool_calls": BOOLEAN, "max_output_tokens": _integer(1), "temperature": SAMPLING["temperature"],
        "top_p": {"type": "number"}, "stop": _one_of(STRING, STRINGS),
        "text": _object({"format": fmt, "verbosity": STRING}), "truncation": _const("disabled"),
        "top_logprobs": _const(0), "background": _const(False),
        "store": BOOLEAN, "include": STRINGS, "prompt_cache_key": STRING, "prompt_cache_retention": STRING,
        "metadata": OBJECT, "client_metadata": OBJECT, "reasoning": OBJECT, "service_tier": STRING, "user": STRING,
        "safety_identifier": STRING, "stream_options": OBJECT,
    }
    return _object(properties, ("input",), extra=False, description="OpenAI Responses, translated to the engine's "
                   "chat completions (gateway/README.md lists what is translated, ignored and refused).")


def harness_event() -> Schema:
    """POST /r/{id}/events: the kinds a harness may post (rewards and state changes are the grader's and the
    controller's: 403)."""
    kinds = [kind.value for kind in EventKind if kind not in (EventKind.REWARD, EventKind.STATE)]
    return _object({"kind": {"enum": kinds}, "payload": {**OBJECT, "default": {}}}, ("kind",), extra=False,
                   description="An event of the rollout's current attempt (EventIn, as a harness may post it).")


def harness_schemas() -> dict[str, Schema]:
    """The components, by name."""
    return {"HarnessEvent": harness_event(), "ChatCompletionRequest": chat_completion(),
            "CompletionRequest": completion(),
            "MessagesRequest": anthropic_messages(count=False), "CountTokensRequest": anthropic_messages(count=True),
            "ResponsesRequest": responses()}
