"""Whether a recorded answer called a tool, read from the answer the harness saw (pure; never raises).

The engine's finish reason does not say it: an answer to a forced `tool_choice` ends `stop` (or `length`) although
it holds a call. So the recorded `response_raw` is read: a unary answer's JSON (Messages `tool_use` content blocks,
chat `tool_calls`, Responses `function_call` output items) or a stream's `data:` events (a `tool_use` content block
started, a chat delta with a call's id, a Responses `function_call` item).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from gateway.records import CallRecord

MAX_RAW_CHARS = 2_000_000  # answers longer than this are not read (no tool call found)
CALL_TYPES = ("tool_use", "function_call")


def _has_call(document: Any) -> bool:
    """Whether one JSON document of any of the three protocols (a whole answer or one stream event) holds a call."""
    if not isinstance(document, dict):
        return False
    blocks = [document.get("content_block"), document.get("item")]
    for key in ("content", "output"):
        blocks += document[key] if isinstance(document.get(key), list) else []
    if any(isinstance(block, dict) and block.get("type") in CALL_TYPES for block in blocks):
        return True
    for choice in document.get("choices") if isinstance(document.get("choices"), list) else []:
        holder = (choice.get("message") or choice.get("delta")) if isinstance(choice, dict) else None
        calls = holder.get("tool_calls") if isinstance(holder, dict) else None
        if isinstance(calls, list) and any(isinstance(c, dict) and c.get("id") for c in calls):
            return True
    return False


def _documents(raw: str) -> list[Any]:
    """The JSON documents of a unary answer (one) or a stream (each `data:` line's)."""
    try:
        return [json.loads(raw)]
    except ValueError:
        pass
    documents = []
    for line in raw.splitlines():
        if line.startswith("data:"):
            try:
                documents.append(json.loads(line[5:]))
            except ValueError:
                continue
    return documents


def called_a_tool(call: CallRecord) -> bool:
    """Whether the answer of a successful `call` holds a tool call (False for failed calls and unreadable answers)."""
    raw = call.response_raw
    if call.status != "ok" or not raw or len(raw) > MAX_RAW_CHARS:
        return False
    return any(_has_call(document) for document in _documents(raw))


def tool_call_answers(calls: Sequence[CallRecord]) -> int:
    """How many of the rollout's answers called a tool."""
    return sum(called_a_tool(call) for call in calls)
