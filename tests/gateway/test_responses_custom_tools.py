"""Responses `custom` (free-form) tools, such as Codex's `apply_patch`: offered to the model as a function of one
string argument, its calls answered as `custom_tool_call` items (unary and streamed, valid for the openai SDK's
types), and the harness's next request (`custom_tool_call`, `custom_tool_call_output`) back to the same chat turn."""

from __future__ import annotations

import json

import orjson
from openai.types.responses import Response

from gateway.protocols.responses import RESPONSES
from gateway.protocols.responses_answer import custom_input
from tests.gateway.test_responses_translation import (
    CALL_A,
    TOOL_READ,
    call_delta,
    chat_answer,
    chat_of,
    chunk,
    events_of,
)

GRAMMAR = 'start: begin_patch hunk+ end_patch\nbegin_patch: "*** Begin Patch" LF\n'
APPLY_PATCH = {"type": "custom", "name": "apply_patch", "description": "Edit files. This is a FREEFORM tool.",
               "format": {"type": "grammar", "syntax": "lark", "definition": GRAMMAR}}
PATCH = "*** Begin Patch\n*** Update File: a.py\n@@\n-x = 1\n+x = 2\n*** End Patch\n"
PATCH_CALL = {"type": "function_call", "call_id": "call_p", "name": "apply_patch",
              "arguments": json.dumps({"input": PATCH})}
BODY = {"model": "gpt-5.5", "input": "fix a.py", "tools": [TOOL_READ, APPLY_PATCH]}


def test_a_custom_tool_is_offered_as_a_function_of_one_string_argument_with_its_grammar():
    tools = chat_of(BODY)["tools"]
    assert [t["function"]["name"] for t in tools] == ["read", "apply_patch"]
    function = tools[1]["function"]
    assert function["description"] == APPLY_PATCH["description"]
    parameters = function["parameters"]
    assert (parameters["required"], list(parameters["properties"])) == (["input"], ["input"])
    assert parameters["properties"]["input"]["type"] == "string"
    assert GRAMMAR in parameters["properties"]["input"]["description"]
    plain = chat_of({**BODY, "tools": [{"type": "custom", "name": "note"}]})["tools"][0]["function"]
    assert "Free-form text" in plain["parameters"]["properties"]["input"]["description"]


def test_a_call_of_a_custom_tool_is_answered_as_a_custom_tool_call_with_the_input_text():
    answer = RESPONSES.from_chat(chat_answer("patching", [PATCH_CALL, CALL_A], "tool_calls"), BODY, "resp_9")
    response = Response.model_validate(answer)
    custom, function = response.output[1], response.output[2]
    assert (custom.type, custom.call_id, custom.name, custom.input) == ("custom_tool_call", "call_p", "apply_patch",
                                                                        PATCH)
    assert (function.type, function.name) == ("function_call", "read")
    assert custom.id != function.id


def test_a_streamed_custom_call_gets_its_own_events_and_item():
    stream = RESPONSES.stream({**BODY, "stream": True}, "resp_3")
    sse = stream.feed(chunk(call_delta(0, PATCH_CALL, "")))
    sse += stream.feed(chunk(call_delta(0, None, PATCH_CALL["arguments"]), finish="tool_calls"))
    events = events_of(sse + stream.finish())  # each validated as the SDK's event type
    assert [e["type"] for e in events] == [
        "response.created", "response.in_progress", "response.output_item.added",
        "response.custom_tool_call_input.delta", "response.custom_tool_call_input.done", "response.output_item.done",
        "response.completed"]
    assert events[3]["delta"] == events[4]["input"] == PATCH
    final = Response.model_validate(events[-1]["response"])
    assert [(i.type, i.input) for i in final.output] == [("custom_tool_call", PATCH)]


def test_what_the_model_wrote_off_the_one_argument_shape_is_the_input_as_written():
    assert custom_input(json.dumps({"input": PATCH})) == PATCH
    for written in ("*** Begin Patch", '{"patch": "x"}', '{"input": 3}', '{"input": "a", "more": 1}', "[]"):
        assert custom_input(written) == written


def test_the_harness_sending_the_call_and_its_output_back_is_the_same_chat_turn():
    answer = RESPONSES.from_chat(chat_answer(None, [PATCH_CALL], "tool_calls"), BODY, "resp_9")
    item = answer["output"][0]
    later = chat_of({**BODY, "input": [{"role": "user", "content": "fix a.py"}, item,
                                       {"type": "custom_tool_call_output", "call_id": "call_p", "output": "Done!"}]})
    assistant, result = later["messages"][1:]
    call = assistant["tool_calls"][0]
    assert (call["id"], call["function"]["name"]) == ("call_p", "apply_patch")
    assert json.loads(call["function"]["arguments"]) == {"input": PATCH}
    assert result == {"role": "tool", "tool_call_id": "call_p", "content": "Done!"}


def test_a_chain_continued_by_id_carries_the_custom_call():
    answer = RESPONSES.from_chat(chat_answer(None, [PATCH_CALL], "tool_calls"), BODY, "resp_9")
    history = [{"request": BODY, "response_raw": orjson.dumps(answer)}]
    later = chat_of({**BODY, "previous_response_id": "resp_9",
                     "input": [{"type": "custom_tool_call_output", "call_id": "call_p", "output": "ok"}]}, history)
    assert [m["role"] for m in later["messages"]] == ["user", "assistant", "tool"]
    assert json.loads(later["messages"][1]["tool_calls"][0]["function"]["arguments"])["input"] == PATCH
