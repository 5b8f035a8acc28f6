"""The Responses adapter's pure translations: items -> chat messages, refusals naming the field, chat answers ->
response objects, stream chunks -> Responses SSE events, recorded answers -> history. Shapes are checked against the
official `openai` SDK's own types (pydantic validation of every event and response)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from gateway.errors import BadRequest
from gateway.protocols.responses import RESPONSES
from gateway.translated import UNTRANSLATABLE

EVENT = TypeAdapter(ResponseStreamEvent)
CALL_A = {"type": "function_call", "call_id": "call_a", "name": "read", "arguments": '{"path": "a.py"}'}
CALL_B = {"type": "function_call", "call_id": "call_b", "name": "run", "arguments": '{"cmd": "ls"}'}
TOOL_READ = {"type": "function", "name": "read", "description": "Read a file",
             "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}, "strict": True}


def chat_of(body: dict[str, Any], history: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The chat request of `body` continuing the recorded calls `history` (each its request and its answer as the
    harness saw it), as the gateway builds it: the calls' turns (`continued`) stored as one JSON continuation."""
    turns = [RESPONSES.continued(entry["request"], entry["response_raw"]) for entry in history or []]
    return RESPONSES.to_chat(RESPONSES.parse(orjson.dumps(body)), orjson.loads(orjson.dumps(turns)))


def as_list(value: Any) -> list[Any]:
    """`input` as items: a string is one user message."""
    return [{"role": "user", "content": value}] if isinstance(value, str) else list(value)


def tool_call(call: dict[str, Any]) -> dict[str, Any]:
    return {"id": call["call_id"], "type": "function",
            "function": {"name": call["name"], "arguments": call["arguments"]}}


REQUEST_CASES = [
    ("string input", {"input": "hi"}, [{"role": "user", "content": "hi"}]),
    ("instructions first", {"instructions": "be brief", "input": "hi"},
     [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]),
    ("developer and system are system; parts joined by a newline",
     {"input": [{"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "a"},
                                                                   {"type": "input_text", "text": "b"}]},
                {"role": "system", "content": "c"}, {"role": "user", "content": "d"}]},
     [{"role": "system", "content": "a\nb"}, {"role": "system", "content": "c"}, {"role": "user", "content": "d"}]),
    ("consecutive function calls are one assistant turn (parallel calls)",
     {"input": [{"role": "user", "content": "go"}, CALL_A, CALL_B,
                {"type": "function_call_output", "call_id": "call_a", "output": "x = 1"},
                {"type": "function_call_output", "call_id": "call_b",
                 "output": [{"type": "input_text", "text": "a.py"}]}]},
     [{"role": "user", "content": "go"}, {"role": "assistant", "content": "", "tool_calls": [tool_call(CALL_A),
                                                                                         tool_call(CALL_B)]},
      {"role": "tool", "tool_call_id": "call_a", "content": "x = 1"},
      {"role": "tool", "tool_call_id": "call_b", "content": "a.py"}]),
    ("assistant text then its call, reasoning dropped",
     {"input": [{"role": "user", "content": "go"},
                {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "zzz"},
                {"type": "message", "role": "assistant",
                 "content": [{"type": "output_text", "text": "reading", "annotations": []}]}, CALL_A]},
     [{"role": "user", "content": "go"},
      {"role": "assistant", "content": "reading", "tool_calls": [tool_call(CALL_A)]}]),
]


@pytest.mark.parametrize(("body", "messages"), [case[1:] for case in REQUEST_CASES],
                         ids=[case[0] for case in REQUEST_CASES])
def test_input_items_become_chat_messages(body, messages):
    assert chat_of({"model": "gpt-5", **body})["messages"] == messages


def test_function_tools_and_sampling_fields_carry_over_and_hosted_tools_are_dropped():
    chat = chat_of({"model": "gpt-5-codex", "input": "hi", "tools": [TOOL_READ, {"type": "web_search"},
                                                                     {"type": "local_shell"}],
                    "tool_choice": {"type": "function", "name": "read"}, "parallel_tool_calls": False,
                    "max_output_tokens": 64, "temperature": 0.5, "top_p": 0.9, "stop": ["END"],
                    "text": {"format": {"type": "json_schema", "name": "out", "schema": {"type": "object"}},
                             "verbosity": "low"}})
    assert chat["tools"] == [{"type": "function", "function": {
        "name": "read", "description": "Read a file", "strict": True,
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}}]
    assert chat["tool_choice"] == {"type": "function", "function": {"name": "read"}}
    assert chat["parallel_tool_calls"] is False
    assert (chat["max_tokens"], chat["temperature"], chat["top_p"], chat["stop"]) == (64, 0.5, 0.9, ["END"])
    assert chat["response_format"] == {"type": "json_schema", "json_schema": {"name": "out",
                                                                              "schema": {"type": "object"}}}


NAMESPACE = {"type": "namespace", "name": "multi_agent_v1", "description": "Sub-agents.",
             "tools": [{"type": "function", "name": "spawn_agent", "parameters": {"type": "object"}},
                       {"type": "custom", "name": "freeform"}]}


def test_namespaced_functions_are_offered_by_name_and_their_calls_keep_the_namespace():
    body = {"model": "gpt-5-codex", "input": "hi", "tools": [TOOL_READ, NAMESPACE]}
    assert [t["function"]["name"] for t in chat_of(body)["tools"]] == ["read", "spawn_agent", "freeform"]
    spawn = {"type": "function_call", "call_id": "call_s", "name": "spawn_agent", "arguments": "{}"}
    answer = RESPONSES.from_chat(chat_answer(None, [spawn, CALL_A], "tool_calls"), body, "resp_1")
    assert [(i["name"], i.get("namespace")) for i in answer["output"]] == [("spawn_agent", "multi_agent_v1"),
                                                                           ("read", None)]
    stream = RESPONSES.stream(body, "resp_2")
    events = events_of(stream.feed(chunk(call_delta(0, spawn, ""))) + stream.finish())
    assert events[-1]["response"]["output"][0]["namespace"] == "multi_agent_v1"
    later = chat_of({**body, "input": [{**spawn, "namespace": "multi_agent_v1"},
                                       {"type": "function_call_output", "call_id": "call_s", "output": "ok"}]})
    assert later["messages"][0]["tool_calls"][0]["function"]["name"] == "spawn_agent"


def test_what_codex_sends_is_accepted_and_nothing_of_it_reaches_the_engine():
    body = {"model": "gpt-5-codex", "instructions": "You are Codex.", "input": [{"role": "user", "content": "fix"}],
            "tools": [TOOL_READ, {"type": "web_search", "external_web_access": False}, NAMESPACE],
            "tool_choice": "auto",
            "parallel_tool_calls": False, "reasoning": {"effort": "medium", "summary": "auto"}, "store": False,
            "stream": True, "include": ["reasoning.encrypted_content"], "prompt_cache_key": "abc",
            "client_metadata": {"x": "y"}, "metadata": {"k": "v"}, "service_tier": "auto", "user": "u",
            "safety_identifier": "s", "truncation": "disabled", "text": {"verbosity": "low"}, "conversation": None}
    chat = chat_of(body)
    assert set(chat) == {"messages", "tools", "tool_choice", "parallel_tool_calls"}


REFUSALS = [
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "data:..."}]}]},
     "input[0].content[0].type", "text only"),
    ({"input": "hi", "seed": 3}, "seed", "'seed'"),
    ({"input": "hi", "truncation": "auto"}, "truncation", "never truncates"),
    ({"input": "hi", "background": True}, "background", "background"),
    ({"input": "hi", "top_logprobs": 3}, "top_logprobs", "top_logprobs"),
    ({"input": "hi", "conversation": {"id": "conv_1"}}, "conversation", "'conversation'"),
    ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input[0].type", "item_reference"),
    ({"input": [{"type": "function_call_output", "output": "x"}]}, "input[0].call_id", "call_id"),
    ({"input": [{"role": "tool", "content": "x"}]}, "input[0].role", "'tool'"),
    ({"input": "hi", "tools": [{"type": "file_reader"}]}, "tools[0]", "'file_reader'"),
    ({"input": "hi", "tools": [TOOL_READ, {"type": "namespace", "name": "n", "tools": [TOOL_READ]}]}, "tools",
     "'read'"),
    ({"input": "hi", "tools": [TOOL_READ], "tool_choice": {"type": "function", "name": "write"}},
     "tool_choice", "'write'"),
    ({"input": "hi", "tool_choice": "required"}, "tool_choice", "no function tools"),
    ({"input": "hi", "text": {"format": {"type": "grammar"}}}, "text.format", "json_schema"),
    ({"input": "hi", "max_output_tokens": 0}, "max_output_tokens", "positive"),
    ({"input": "hi", "temperature": "hot"}, "temperature", "a number"),
    ({"input": "hi", "parallel_tool_calls": 1}, "parallel_tool_calls", "a boolean"),
    ({"input": "hi", "stop": ["a", 1]}, "stop", "list of strings"),
    ({"input": 3}, "input", "string or a list"),
    ({"input": []}, "input", "empty"),
]


@pytest.mark.parametrize(("body", "param", "words"), REFUSALS, ids=[case[1] for case in REFUSALS])
def test_what_the_gateway_cannot_honour_is_refused_naming_the_field(body, param, words):
    with pytest.raises(BadRequest) as caught:
        chat_of({"model": "gpt-5", **body})
    assert caught.value.param == param
    assert words in caught.value.message
    error = orjson.loads(RESPONSES.error_body(400, caught.value.message, caught.value.code))["error"]
    assert (error["type"], error["message"]) == ("invalid_request_error", caught.value.message)


JSON = st.recursive(st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.text(max_size=5)
                    | st.sampled_from(["message", "function_call", "function_call_output", "user", "input_text",
                                       "function", "web_search", "reasoning", "input_image", "custom",
                                       "custom_tool_call", "custom_tool_call_output"]),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(
                        ["type", "role", "content", "text", "call_id", "name", "arguments", "output", "format",
                         "input"]),
                        inner, max_size=4), max_leaves=12)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from(["input", "tools", "tool_choice", "text", "instructions", "stop",
                                        "max_output_tokens", "store", "truncation"]), JSON, max_size=4))
def test_any_json_body_is_translated_or_refused_with_a_400(body):
    try:
        chat_of({"model": "m", "input": "hi", **body})
    except BadRequest as refused:
        assert refused.status == 400 and refused.message


CHUNKS = st.lists(st.fixed_dictionaries({"choices": st.lists(st.fixed_dictionaries({
    "index": st.sampled_from([0, 0, 1]), "finish_reason": st.sampled_from([None, "stop", "length", "tool_calls"]),
    "delta": st.fixed_dictionaries({}, optional={
        "content": st.one_of(st.text(max_size=3), st.none(), st.integers()),
        "tool_calls": st.lists(st.fixed_dictionaries({"index": st.integers(0, 2)}, optional={
            "id": st.text(max_size=3), "function": st.fixed_dictionaries({}, optional={
                "name": st.one_of(st.text(max_size=3), st.just("patch")),
                "arguments": st.one_of(st.text(max_size=3), st.integers(), st.just('{"input": "x"}'))})}),
            max_size=2)})}), max_size=2)}), max_size=6)


@settings(max_examples=200, deadline=None)
@given(CHUNKS)
def test_any_chunk_sequence_streams_valid_events_or_breaks_the_protocol_cleanly(chunks):
    """Each chunk is translated or refused with one of what the forwarder treats as a broken answer; the events
    sent, then the closing (or the error) events, are valid Responses events in sequence (a call of the custom tool
    `patch` as a custom_tool_call item)."""
    stream = RESPONSES.stream({"model": "m", "input": "go", "tools": [{"type": "custom", "name": "patch"}]}, "resp_1")
    sse = b""
    try:
        for each in chunks:
            sse += stream.feed(each)
        sse += stream.finish()
    except UNTRANSLATABLE:
        sse += stream.error("broken", "upstream_protocol_error")
    events = events_of(sse)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert events[-1]["type"] in ("response.completed", "response.incomplete", "response.failed")


@settings(max_examples=200, deadline=None)
@given(st.fixed_dictionaries({"id": st.just("chatcmpl-1"), "choices": st.lists(st.fixed_dictionaries({
    "finish_reason": st.sampled_from([None, "stop", "length", "tool_calls"]),
    "message": st.fixed_dictionaries({}, optional={"content": JSON, "tool_calls": JSON})}), max_size=1)},
    optional={"usage": st.fixed_dictionaries({"prompt_tokens": st.integers(0, 9), "completion_tokens":
                                               st.integers(0, 9)})}))
def test_any_chat_answer_becomes_a_valid_response_or_breaks_the_protocol_cleanly(answer):
    try:
        response = RESPONSES.from_chat(answer, {"model": "m", "input": "go"}, "resp_1")
    except UNTRANSLATABLE:
        return
    Response.model_validate(response)


def chat_answer(content: str | None, calls: list[dict[str, Any]], finish: str) -> dict[str, Any]:
    message = {"role": "assistant", "content": content, "tool_calls": [tool_call(c) for c in calls]}
    return {"id": "chatcmpl-42", "object": "chat.completion", "created": 7, "model": "tiny",
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": 11, "completion_tokens": 5, "total_tokens": 16}}


ANSWER_CASES = [
    ("text", chat_answer("done", [], "stop"), [("message", "done")], "completed"),
    ("two parallel calls, no text item", chat_answer(None, [CALL_A, CALL_B], "tool_calls"),
     [("function_call", "call_a"), ("function_call", "call_b")], "completed"),
    ("text then a call", chat_answer("let me look", [CALL_A], "tool_calls"),
     [("message", "let me look"), ("function_call", "call_a")], "completed"),
    ("cut at max tokens", chat_answer("partial", [], "length"), [("message", "partial")], "incomplete"),
]


@pytest.mark.parametrize(("answer", "items", "status"), [case[1:] for case in ANSWER_CASES],
                         ids=[case[0] for case in ANSWER_CASES])
def test_chat_answers_become_response_objects(answer, items, status):
    body = {"model": "gpt-5-codex", "input": "hi", "tools": [TOOL_READ]}
    rid = RESPONSES.response_id("r-1", 0, 3)
    response = Response.model_validate(RESPONSES.from_chat(answer, body, rid))
    assert (response.id, response.object, response.model, response.status) == (
        rid, "response", "gpt-5-codex", status)
    seen = [(item.type, item.content[0].text if item.type == "message" else item.call_id)
            for item in response.output]
    assert seen == items
    calls = {item.call_id: (item.name, item.arguments) for item in response.output if item.type == "function_call"}
    assert calls == {c["call_id"]: (c["name"], c["arguments"]) for c in (CALL_A, CALL_B) if c["call_id"] in calls}
    assert (response.usage.input_tokens, response.usage.output_tokens, response.usage.total_tokens) == (11, 5, 16)
    if status == "incomplete":
        assert response.incomplete_details.reason == "max_output_tokens"


def test_response_ids_are_fixed_per_rollout_attempt_and_call():
    ids = {RESPONSES.response_id(rollout, attempt, seq) for rollout in ("r-1", "r-2") for attempt in (0, 1)
           for seq in (0, 1)}
    assert len(ids) == 8 and all(i.startswith("resp_") for i in ids)
    assert RESPONSES.response_id("r-1", 0, 0) == RESPONSES.response_id("r-1", 0, 0)


def chunk(delta: dict[str, Any], *, finish: str | None = None, ids: tuple[int, ...] = (9,)) -> dict[str, Any]:
    return {"id": "chatcmpl-77", "object": "chat.completion.chunk", "created": 7,
            "choices": [{"index": 0, "delta": delta, "token_ids": list(ids), "finish_reason": finish}]}


def call_delta(index: int, call: dict[str, Any] | None, arguments: str) -> dict[str, Any]:
    head = {"id": call["call_id"], "type": "function", "function": {"name": call["name"], "arguments": ""}} \
        if call else {"function": {"arguments": arguments}}
    return {"tool_calls": [{"index": index, **head}]}


def events_of(sse: bytes) -> list[dict[str, Any]]:
    """Each SSE event's data, after checking its `event:` line names its type and it validates as the SDK's type."""
    events = []
    for block in sse.decode().strip().split("\n\n"):
        head, data = block.split("\n")
        event = orjson.loads(data.removeprefix("data: "))
        assert head == f"event: {event['type']}"
        EVENT.validate_python(event)
        events.append(event)
    return events


def test_a_stream_with_text_and_two_parallel_calls_becomes_responses_events():
    stream = RESPONSES.stream({"model": "gpt-5-codex", "input": "go", "stream": True}, "resp_77")
    first = {**chunk({"role": "assistant", "content": ""}, ids=()), "prompt_token_ids": [1, 2, 3, 4]}
    chunks = [first, chunk({"content": "Look"}), chunk({"content": "ing."}),
              chunk(call_delta(0, CALL_A, "")), chunk(call_delta(0, None, CALL_A["arguments"])),
              chunk(call_delta(1, CALL_B, "")), chunk(call_delta(1, None, CALL_B["arguments"][:5])),
              chunk(call_delta(1, None, CALL_B["arguments"][5:]), finish="tool_calls")]
    sse = b"".join(stream.feed(c) for c in chunks) + stream.finish()
    events = events_of(sse)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert [e["type"] for e in events] == [
        "response.created", "response.in_progress",
        "response.output_item.added", "response.content_part.added", "response.output_text.delta",
        "response.output_text.delta", "response.output_text.done", "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added", "response.function_call_arguments.delta",
        "response.function_call_arguments.done", "response.output_item.done",
        "response.output_item.added", "response.function_call_arguments.delta",
        "response.function_call_arguments.done", "response.output_item.done", "response.completed"]
    final = Response.model_validate(events[-1]["response"])
    assert final.id == events[0]["response"]["id"] == "resp_77"
    assert final.output_text == "Looking."
    assert [(i.call_id, i.name, i.arguments) for i in final.output if i.type == "function_call"] == [
        (c["call_id"], c["name"], c["arguments"]) for c in (CALL_A, CALL_B)]
    assert (final.usage.input_tokens, final.usage.output_tokens) == (4, 7)
    done = [e["item"] for e in events if e["type"] == "response.output_item.done"]
    assert done == [item.model_dump(exclude_none=True) | {"content": [
        {"type": "output_text", "text": "Looking.", "annotations": [], "logprobs": []}]}
        if item.type == "message" else item.model_dump(exclude_none=True) for item in final.output]


def test_a_stream_cut_at_max_tokens_ends_incomplete_and_an_error_ends_failed():
    stream = RESPONSES.stream({"model": "m", "input": "go"}, "resp_1")
    sse = stream.feed(chunk({"content": "abc"}, finish="length")) + stream.finish()
    last = events_of(sse)[-1]
    assert (last["type"], last["response"]["status"]) == ("response.incomplete", "incomplete")
    assert last["response"]["incomplete_details"] == {"reason": "max_output_tokens"}
    broken = RESPONSES.stream({"model": "m", "input": "go"}, "resp_1")
    sse = broken.feed(chunk({"content": "ab"})) + broken.error("upstream stream broke", "stream_broken")
    error, failed = events_of(sse)[-2:]
    assert (error["type"], error["code"]) == ("error", "stream_broken")
    assert failed["type"] == "response.failed" and failed["response"]["status"] == "failed"
    assert "upstream stream broke" in failed["response"]["error"]["message"]


def test_interleaved_tool_call_deltas_make_whole_items_in_the_order_the_calls_began():
    """Chat may interleave tool-call deltas by index (which the model's parallel calls decide): the calls are held
    and go out whole at the end, never a broken stream."""
    stream = RESPONSES.stream({"model": "m", "input": "go"}, "resp_1")
    sse = stream.feed(chunk(call_delta(0, CALL_A, "")))
    sse += stream.feed(chunk(call_delta(1, CALL_B, "")))
    sse += stream.feed(chunk(call_delta(1, None, CALL_B["arguments"][:4])))
    sse += stream.feed(chunk(call_delta(0, None, CALL_A["arguments"])))
    sse += stream.feed(chunk(call_delta(1, None, CALL_B["arguments"][4:]), finish="tool_calls"))
    assert [e["type"] for e in events_of(sse)] == ["response.created", "response.in_progress"]
    final = events_of(sse + stream.finish())[-1]
    assert final["type"] == "response.completed" and stream.model_fault is None
    assert [(i["call_id"], i["arguments"]) for i in final["response"]["output"]] == [
        (CALL_A["call_id"], CALL_A["arguments"]), (CALL_B["call_id"], CALL_B["arguments"])]


def test_an_empty_answer_still_gets_one_message_item():
    stream = RESPONSES.stream({"model": "m", "input": "go"}, "resp_1")
    events = events_of(stream.feed(chunk({"content": ""}, finish="stop")) + stream.finish())
    assert Response.model_validate(events[-1]["response"]).output[0].type == "message"


@pytest.mark.parametrize("body", [case[1] for case in REQUEST_CASES], ids=[case[0] for case in REQUEST_CASES])
def test_a_continued_turn_keeps_only_what_reached_the_engine_and_translates_the_same(body):
    body = {"model": "m", **body}
    answer = orjson.dumps(RESPONSES.from_chat(chat_answer("ok", [], "stop"), body, "resp_1"))
    continuing = {"model": "m", "previous_response_id": "resp_1", "input": "next"}
    direct = chat_of({"model": "m", "input": [*as_list(body["input"]), *orjson.loads(answer)["output"],
                                              {"role": "user", "content": "next"}]})
    assert chat_of(continuing, [{"request": body, "response_raw": answer}]) == direct
    stored = orjson.dumps(RESPONSES.continued(RESPONSES.parse(orjson.dumps(body)), answer))
    assert b"reasoning" not in stored and b"encrypted_content" not in stored and b"annotations" not in stored


def test_a_continued_turn_drops_the_harnesss_own_fields_and_large_reasoning():
    reasoning = {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "z" * 100_000}
    body = {"model": "m", "input": [reasoning, {"type": "message", "role": "user", "id": "msg_1", "status": "done",
                                                "content": [{"type": "input_text", "text": "hi"}]}, reasoning]}
    turn = RESPONSES.continued(RESPONSES.parse(orjson.dumps(body)), orjson.dumps({"output": []}))
    assert turn == [[{"type": "message", "role": "user", "content": "hi"}], []]


def test_previous_response_history_is_earlier_inputs_then_their_outputs():
    first_body = {"model": "m", "instructions": "old rules", "input": "read a.py", "tools": [TOOL_READ]}
    first_answer = orjson.dumps(RESPONSES.from_chat(chat_answer("ok", [CALL_A], "tool_calls"), first_body, "resp_1"))
    stream = RESPONSES.stream(first_body, "resp_2")
    second_body = {"model": "m", "input": [{"type": "function_call_output", "call_id": "call_a", "output": "x"}]}
    streamed = stream.feed(chunk({"content": "now run"})) + stream.feed(chunk(call_delta(0, CALL_B, ""))) \
        + stream.feed(chunk(call_delta(0, None, CALL_B["arguments"]), finish="tool_calls")) + stream.finish()
    history = [{"request": first_body, "response_raw": first_answer},
               {"request": second_body, "response_raw": streamed.decode()}]
    third = {"model": "m", "instructions": "new rules", "previous_response_id": "resp_x",
             "input": [{"type": "function_call_output", "call_id": "call_b", "output": "a.py"}]}
    assert RESPONSES.previous_id(third) == "resp_x"
    assert chat_of(third, history)["messages"] == [
        {"role": "system", "content": "new rules"},
        {"role": "user", "content": "read a.py"},
        {"role": "assistant", "content": "ok", "tool_calls": [tool_call(CALL_A)]},
        {"role": "tool", "tool_call_id": "call_a", "content": "x"},
        {"role": "assistant", "content": "now run", "tool_calls": [tool_call(CALL_B)]},
        {"role": "tool", "tool_call_id": "call_b", "content": "a.py"}]
