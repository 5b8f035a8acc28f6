"""OpenAI Responses answers built from the engine's chat completions (pure), and the output items of a recorded
answer read back (for `previous_response_id`).

A chat answer becomes a `response` object: its text a `message` item with one `output_text` part, each tool call a
`function_call` item (`call_id` = the engine's tool-call id), or a `custom_tool_call` item when it calls a `custom`
tool (its `input`: the call's one string argument, `custom_input`), `status` `incomplete` with
`incomplete_details.reason: max_output_tokens` when the engine stopped on length, `usage` in Responses' names.
"""

from __future__ import annotations

import hashlib
import time
from typing import Any

import orjson

from gateway.capture import ProtocolError
from gateway.protocols.responses_request import CUSTOM_ARGUMENT, custom_tool_names, tool_namespaces

INCOMPLETE_REASONS = {"length": "max_output_tokens", "content_filter": "content_filter"}


def response_id(rollout_id: str, attempt: int, seq: int) -> str:
    """The id the harness sees, fixed before the call goes upstream: distinct for each (rollout, attempt, seq)."""
    digest = hashlib.blake2b(f"{rollout_id}|{attempt}|{seq}".encode(), digest_size=12).hexdigest()
    return f"resp_{digest}"


def status_of(finish_reason: str | None) -> tuple[str, dict[str, str] | None]:
    """(`status`, `incomplete_details`) for the engine's finish reason."""
    reason = INCOMPLETE_REASONS.get(finish_reason or "")
    return ("incomplete", {"reason": reason}) if reason else ("completed", None)


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
    """Responses' usage object (no cache, no reasoning: both counted as 0)."""
    return {"input_tokens": prompt_tokens,
            "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "output_tokens": completion_tokens, "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": prompt_tokens + completion_tokens}


def skeleton(body: dict[str, Any], rid: str, created_at: float) -> dict[str, Any]:
    """The response object before any output: the request's settings echoed as OpenAI echoes them."""
    return {
        "id": rid, "object": "response", "created_at": created_at, "status": "in_progress", "error": None,
        "incomplete_details": None, "instructions": body.get("instructions"),
        "max_output_tokens": body.get("max_output_tokens"), "model": body.get("model", ""), "output": [],
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "previous_response_id": body.get("previous_response_id"), "reasoning": body.get("reasoning"),
        "store": body.get("store", True), "temperature": body.get("temperature"),
        "text": body.get("text") or {"format": {"type": "text"}}, "tool_choice": body.get("tool_choice") or "auto",
        "tools": body.get("tools") or [], "top_p": body.get("top_p"), "truncation": "disabled", "usage": None,
        "user": body.get("user"), "metadata": body.get("metadata") or {},
    }


def message_item(item_id: str, text: str, status: str) -> dict[str, Any]:
    """An assistant `message` output item with one `output_text` part."""
    return {"id": item_id, "type": "message", "role": "assistant", "status": status,
            "content": [text_part(text)]}


def text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def call_item(item_id: str, call_id: str, name: str, arguments: str, status: str,
              namespace: str | None) -> dict[str, Any]:
    """A `function_call` output item (with the `namespace` its function was offered in, if any)."""
    item = {"id": item_id, "type": "function_call", "status": status, "call_id": call_id, "name": name,
            "arguments": arguments}
    return item if namespace is None else {**item, "namespace": namespace}


def custom_item(item_id: str, call_id: str, name: str, text: str, status: str) -> dict[str, Any]:
    """A `custom_tool_call` output item: a call of a free-form tool with its `input` text."""
    return {"id": item_id, "type": "custom_tool_call", "status": status, "call_id": call_id, "name": name,
            "input": text}


def custom_input(arguments: str) -> str:
    """The `input` of a custom tool's call from the arguments the model wrote for its function: the one string
    argument when the arguments are exactly `{"input": "..."}`, else the arguments as written (the model's answer,
    carried as it came: the tool gets it and answers what is wrong with it)."""
    try:
        parsed = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return arguments
    if isinstance(parsed, dict) and list(parsed) == [CUSTOM_ARGUMENT] and isinstance(parsed[CUSTOM_ARGUMENT], str):
        return parsed[CUSTOM_ARGUMENT]
    return arguments


def tool_call_item(item_id: str, call_id: str, name: str, arguments: str, status: str, namespaces: dict[str, str],
                   customs: frozenset[str]) -> dict[str, Any]:
    """The output item of one tool call: a `custom_tool_call` for a custom tool, else a `function_call`."""
    if name in customs:
        return custom_item(item_id.replace("fc_", "ctc_", 1), call_id, name, custom_input(arguments), status)
    return call_item(item_id, call_id, name, arguments, status, namespaces.get(name))


def output_items(message: dict[str, Any], rid: str, status: str, namespaces: dict[str, str],
                 customs: frozenset[str] = frozenset()) -> list[dict[str, Any]]:
    """The output items of one chat choice's message: its text (if any, or nothing at all), then its tool calls.
    ProtocolError (a broken answer) for a message off the chat shapes."""
    suffix = rid.removeprefix("resp_")
    text = message.get("content") or ""
    calls = message.get("tool_calls") or []
    if not isinstance(text, str) or not isinstance(calls, list):
        raise ProtocolError(f"the answer's message is off the chat shape: {str(message)[:120]}")
    items = [message_item(f"msg_{suffix}", text, status)] if text or not calls else []
    for i, call in enumerate(calls):
        function = call.get("function") if isinstance(call, dict) else None
        name, arguments = (function.get("name"), function.get("arguments") or "") if isinstance(function, dict) \
            else (None, None)
        call_id = call.get("id") or f"call_{suffix}_{i}" if isinstance(call, dict) else None
        if not all(isinstance(value, str) for value in (name, arguments, call_id)):
            raise ProtocolError(f"tool call {i} of the answer is off the chat shape: {str(call)[:120]}")
        items.append(tool_call_item(f"fc_{suffix}_{i}", call_id, name, arguments, "completed", namespaces, customs))
    return items


def from_chat(answer: dict[str, Any], body: dict[str, Any], rid: str) -> dict[str, Any]:
    """The `response` object `rid` for a non-streamed chat answer (its first choice: Responses has no `n`)."""
    choice = (answer.get("choices") or [{}])[0]
    if not isinstance(choice, dict) or not isinstance(choice.get("message") or {}, dict):
        raise ProtocolError(f"the answer's first choice is off the chat shape: {str(choice)[:120]}")
    status, incomplete = status_of(choice.get("finish_reason"))
    counts = answer.get("usage") or {}
    response = skeleton(body, rid, int(answer.get("created") or time.time()))
    response.update(status=status, incomplete_details=incomplete,
                    output=output_items(choice.get("message") or {}, rid, status,
                                        tool_namespaces(body.get("tools")), custom_tool_names(body.get("tools"))),
                    usage=usage(counts.get("prompt_tokens", 0), counts.get("completion_tokens", 0)))
    return response


FINAL_EVENTS = ("response.completed", "response.incomplete")


def recorded_output(response_raw: bytes | str | None) -> list[dict[str, Any]]:
    """The output items of an answer as the harness saw it: the JSON response's `output`, or for a stream the final
    response event's `output` (else the items of its `response.output_item.done` events). A stream's final event is
    its last: it is looked for from the end, so a whole stream is decoded only when it has none."""
    if not response_raw:
        return []
    raw = response_raw.encode() if isinstance(response_raw, str) else response_raw
    if raw.lstrip().startswith(b"{"):
        return list(orjson.loads(raw).get("output") or [])
    body = raw.rstrip()
    last_line = body[body.rfind(b"\n") + 1:]
    if last_line.startswith(b"data:"):
        last = orjson.loads(last_line[5:])
        if last.get("type") in FINAL_EVENTS:
            return list(last["response"].get("output") or [])
    done: list[dict[str, Any]] = []
    for line in raw.split(b"\n"):
        if not line.startswith(b"data:"):
            continue
        event = orjson.loads(line[5:])
        kind = event.get("type")
        if kind in FINAL_EVENTS:
            return list(event["response"].get("output") or [])
        if kind == "response.output_item.done":
            done.append(event["item"])
    return done
