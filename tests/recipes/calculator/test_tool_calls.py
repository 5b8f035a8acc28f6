"""Reading whether a recorded answer called a tool, in each protocol's unary and streamed shape; the text of an
answer that only talks about tools, failed calls and unreadable bodies count as none."""

from __future__ import annotations

import json

import pytest

from recipes.calculator.tool_calls import called_a_tool, tool_call_answers
from tests.recipes.support import call_record

TOOL_USE = {"type": "tool_use", "id": "toolu_1", "name": "calculator", "input": {"expression": "1 + 1"}}
MESSAGES_UNARY = {"id": "msg_1", "type": "message", "role": "assistant", "stop_reason": "tool_use",
                  "content": [{"type": "text", "text": "Let me compute."}, TOOL_USE]}
MESSAGES_TEXT = {**MESSAGES_UNARY, "stop_reason": "end_turn",
                 "content": [{"type": "text", "text": '{"type": "tool_use", "name": "calculator"} <tool_call>'}]}
CHAT_UNARY = {"choices": [{"index": 0, "finish_reason": "stop", "message": {
    "role": "assistant", "content": None,
    "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "calculator", "arguments": "{}"}}]}}]}
RESPONSES_UNARY = {"object": "response", "output": [{"type": "function_call", "call_id": "c1", "name": "calculator",
                                                     "arguments": "{}"}]}


def sse(*events: dict, named: bool = False) -> str:
    """A stream of `data:` events (with `event:` lines when `named`, as Messages streams have)."""
    lines = []
    for event in events:
        if named:
            lines.append(f"event: {event.get('type', 'message')}")
        lines += [f"data: {json.dumps(event)}", ""]
    return "\n".join(lines) + "\n"


MESSAGES_STREAM = sse({"type": "message_start", "message": {"content": []}},
                      {"type": "content_block_start", "index": 0, "content_block": TOOL_USE},
                      {"type": "message_stop"}, named=True)
MESSAGES_TEXT_STREAM = sse({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
                           {"type": "content_block_delta", "delta": {"type": "text_delta", "text": "tool_use"}},
                           named=True)
CHAT_STREAM = sse({"choices": [{"delta": {"tool_calls": [{"index": 0, "id": "c1", "function": {"name": "calc"}}]}}]},
                  {"choices": [{"delta": {"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]}}]}) \
    + "data: [DONE]\n\n"


def answered(raw: str | None, status: str = "ok"):
    return call_record(0, "", status=status).model_copy(update={"response_raw": raw})


@pytest.mark.parametrize(("raw", "called"), [
    (json.dumps(MESSAGES_UNARY), True),
    (json.dumps(MESSAGES_TEXT), False),  # a text that talks of tool_use is text
    (json.dumps(CHAT_UNARY), True),  # finish reason `stop`, as for a forced call
    (json.dumps(RESPONSES_UNARY), True),
    (MESSAGES_STREAM, True),
    (MESSAGES_TEXT_STREAM, False),
    (CHAT_STREAM, True),
    (None, False),
    ("", False),
    ("not json at all", False),
    ("data: {broken\n\ndata: [1, 2]\n\n", False),
    (json.dumps([TOOL_USE]), False),  # not an answer's shape
    (json.dumps({"choices": "nope", "content": "x", "output": 3}), False),
])
def test_tool_calls_are_read_from_the_answer_the_harness_saw(raw, called):
    assert called_a_tool(answered(raw)) is called


def test_a_failed_call_called_nothing():
    assert called_a_tool(answered(json.dumps(MESSAGES_UNARY), status="error")) is False


def test_answers_that_called_a_tool_are_counted():
    calls = [answered(json.dumps(MESSAGES_UNARY)), answered(json.dumps(MESSAGES_TEXT)), answered(MESSAGES_STREAM)]
    assert tool_call_answers(calls) == 2
