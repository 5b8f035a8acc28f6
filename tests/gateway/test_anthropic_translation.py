"""Anthropic Messages <-> chat completions, pure (issue 13): what each request field becomes, what is accepted and
ignored, what is refused (naming the field), the answer and its stream events, and Anthropic's error shape."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from gateway.capture import ProtocolError
from gateway.errors import BadRequest
from gateway.protocols.anthropic import ADAPTER
from gateway.protocols.anthropic_answer import error_object
from gateway.protocols.anthropic_request import TOOL_ERROR_PREFIX
from gateway.records import CallErrorCode

USER = {"role": "user", "content": "fix the bug"}
BASH = {"name": "Bash", "description": "Run a command", "input_schema": {"type": "object", "properties": {
    "command": {"type": "string"}}, "required": ["command"]}}
BASH_FN = {"type": "function", "function": {"name": "Bash", "description": "Run a command",
                                            "parameters": BASH["input_schema"]}}


def body(**extra: Any) -> dict[str, Any]:
    return {"model": "claude-opus-5-5", "max_tokens": 100, "messages": [USER], **extra}


def chat_of(request: dict[str, Any]) -> dict[str, Any]:
    return ADAPTER.to_chat(ADAPTER.parse(orjson.dumps(request)), [])


TOOL_TURN = [
    USER,
    {"role": "assistant", "content": [
        {"type": "text", "text": "Looking."},
        {"type": "tool_use", "id": "toolu_a", "name": "Bash", "input": {"command": "ls"}},
        {"type": "tool_use", "id": "toolu_b", "name": "Read", "input": {}, "cache_control": {"type": "ephemeral"}}]},
    {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_a", "content": "a.py"},
        {"type": "tool_result", "tool_use_id": "toolu_b", "is_error": True,
         "content": [{"type": "text", "text": "no such"}, {"type": "text", "text": "file"}]},
        {"type": "text", "text": "go on"}]},
]
TOOL_TURN_CHAT = [
    {"role": "user", "content": "fix the bug"},
    {"role": "assistant", "content": "Looking.", "tool_calls": [
        {"id": "toolu_a", "type": "function", "function": {"name": "Bash", "arguments": '{"command": "ls"}'}},
        {"id": "toolu_b", "type": "function", "function": {"name": "Read", "arguments": "{}"}}]},
    {"role": "tool", "tool_call_id": "toolu_a", "content": "a.py"},
    {"role": "tool", "tool_call_id": "toolu_b", "content": TOOL_ERROR_PREFIX + "no such\nfile"},
    {"role": "user", "content": "go on"},
]

CC_CALL = {"type": "tool_use", "id": "toolu_x_0", "name": "Bash", "input": {"command": "ls"}}
CC_RESULT = {"type": "tool_result", "content": "<e>no</e>", "is_error": True, "tool_use_id": "toolu_x_0",
             "cache_control": {"type": "ephemeral"}}
EPHEMERAL = {"type": "ephemeral"}
CLAUDE_CODE = {
    "model": "claude-opus-5-5", "max_tokens": 128000, "stream": True,
    "thinking": {"type": "adaptive", "display": "omitted"},
    "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
    "output_config": {"effort": "medium"}, "metadata": {"user_id": '{"device_id": "d", "session_id": "s"}'},
    "system": [{"type": "text", "text": "header"}, {"type": "text", "text": "role", "cache_control": EPHEMERAL},
               {"type": "text", "text": "rules", "cache_control": EPHEMERAL}],
    "messages": [{"role": "user", "content": [{"type": "text", "text": "<system-reminder>r</system-reminder>"},
                                              {"type": "text", "text": "say hi"}]},
                 {"role": "system", "content": [{"type": "text", "text": "# Environment"}]},
                 {"role": "assistant", "content": [{"type": "text", "text": "ok"}, CC_CALL]},
                 {"role": "user", "content": [CC_RESULT]}],
    "tools": [BASH, {**BASH, "name": "DeferredToolPlaceholder", "defer_loading": True}]}
CLAUDE_CODE_CHAT = {"messages": [
    {"role": "system", "content": "header\nrole\nrules"},
    {"role": "user", "content": "<system-reminder>r</system-reminder>\nsay hi"},
    {"role": "system", "content": "# Environment"},
    {"role": "assistant", "content": "ok", "tool_calls": [
        {"id": "toolu_x_0", "type": "function", "function": {"name": "Bash", "arguments": '{"command": "ls"}'}}]},
    {"role": "tool", "tool_call_id": "toolu_x_0", "content": "Error: <e>no</e>"}],
    "tools": [BASH_FN], "max_tokens": 128000}

REQUESTS = [
    ("plain", body(), {"messages": [USER], "max_tokens": 100}),
    ("system string", body(system="be brief"),
     {"messages": [{"role": "system", "content": "be brief"}, USER], "max_tokens": 100}),
    ("system blocks", body(system=[{"type": "text", "text": "a", "cache_control": {"type": "ephemeral"}},
                                   {"type": "text", "text": "b"}]),
     {"messages": [{"role": "system", "content": "a\nb"}, USER], "max_tokens": 100}),
    ("text blocks", body(messages=[{"role": "user", "content": [{"type": "text", "text": "x"},
                                                                {"type": "text", "text": "y"}]}]),
     {"messages": [{"role": "user", "content": "x\ny"}], "max_tokens": 100}),
    ("tool use both ways", body(messages=TOOL_TURN, tools=[BASH]),
     {"messages": TOOL_TURN_CHAT, "tools": [BASH_FN], "max_tokens": 100}),
    ("sampling", body(temperature=0.5, top_p=0.9, top_k=20, stop_sequences=["END", "STOP"]),
     {"messages": [USER], "max_tokens": 100, "temperature": 0.5, "top_p": 0.9, "top_k": 20,
      "stop": ["END", "STOP"]}),
    ("tool_choice auto", body(tools=[BASH], tool_choice={"type": "auto"}),
     {"messages": [USER], "tools": [BASH_FN], "tool_choice": "auto", "max_tokens": 100}),
    ("tool_choice any, no parallel", body(tools=[BASH], tool_choice={"type": "any", "disable_parallel_tool_use": True}),
     {"messages": [USER], "tools": [BASH_FN], "tool_choice": "required", "parallel_tool_calls": False,
      "max_tokens": 100}),
    ("tool_choice tool", body(tools=[BASH], tool_choice={"type": "tool", "name": "Bash"}),
     {"messages": [USER], "tools": [BASH_FN], "max_tokens": 100,
      "tool_choice": {"type": "function", "function": {"name": "Bash"}}}),
    ("tool_choice none", body(tools=[BASH], tool_choice={"type": "none"}),
     {"messages": [USER], "tools": [BASH_FN], "tool_choice": "none", "max_tokens": 100}),
    ("ignored: what Claude Code sends besides", body(
        metadata={"user_id": "u"}, thinking={"type": "adaptive"}, context_management={"edits": [
            {"type": "clear_thinking_20251015", "keep": "all"}]}, output_config={"effort": "high"},
        cache_control={"type": "ephemeral"}, service_tier="auto", container=None, mcp_servers=[], stream=True,
        tools=[{**BASH, "cache_control": {"type": "ephemeral"}, "eager_input_streaming": True, "strict": False,
                "type": "custom"}]),
     {"messages": [USER], "tools": [BASH_FN], "max_tokens": 100}),
    ("the shape Claude Code 2.1.328 sends (its keys, blocks and headers; our own texts)", CLAUDE_CODE,
     CLAUDE_CODE_CHAT),
    ("deferred tools are not in the prompt", body(tools=[BASH, {**BASH, "name": "Later", "defer_loading": True}]),
     {"messages": [USER], "tools": [BASH_FN], "max_tokens": 100}),
    ("thinking blocks in history are dropped", body(messages=[USER, {"role": "assistant", "content": [
        {"type": "thinking", "thinking": "hmm", "signature": "s"}, {"type": "text", "text": "ok"}]}, USER]),
     {"messages": [USER, {"role": "assistant", "content": "ok"}, USER], "max_tokens": 100}),
]


@pytest.mark.parametrize(("name", "request_body", "expected"), REQUESTS, ids=[r[0] for r in REQUESTS])
def test_request_to_chat(name: str, request_body: dict[str, Any], expected: dict[str, Any]) -> None:
    assert chat_of(request_body) == expected


IMAGE = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}
REFUSALS = [
    ("unknown field", body(logit_bias={"1": 2}), "logit_bias"),
    ("image block", body(messages=[{"role": "user", "content": [{"type": "text", "text": "see"}, IMAGE]}]),
     "messages[0].content[1]"),
    ("image in a tool result", body(messages=[USER, TOOL_TURN[1], {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_a", "content": [IMAGE]}]}]), "messages[2].content[0].content[0]"),
    ("document block", body(messages=[{"role": "user", "content": [{"type": "document", "source": {}}]}]),
     "messages[0].content[0]"),
    ("structured output", body(output_config={"format": {"type": "json_schema", "schema": {}}}),
     "output_config.format"),
    ("server tool", body(tools=[{"type": "web_search_20250305", "name": "web_search"}]), "tools[0].type"),
    ("strict tool", body(tools=[{**BASH, "strict": True}]), "tools[0].strict"),
    ("input examples", body(tools=[{**BASH, "input_examples": [{"command": "ls"}]}]), "tools[0].input_examples"),
    ("tool without schema", body(tools=[{"name": "x"}]), "tools[0].input_schema"),
    ("mcp servers", body(mcp_servers=[{"type": "url", "url": "http://x", "name": "x"}]), "mcp_servers"),
    ("prefill", body(messages=[USER, {"role": "assistant", "content": "The answer is"}]), "messages[1]"),
    ("bad role", body(messages=[{"role": "tool", "content": "x"}]), "messages[0].role"),
    ("no max_tokens", {"model": "m", "messages": [USER]}, "max_tokens"),
    ("max_tokens 0", body(max_tokens=0), "max_tokens"),
    ("empty messages", body(messages=[]), "messages"),
    ("stream not a bool", body(stream="yes"), "stream"),
    ("bad tool_choice", body(tool_choice={"type": "sometimes"}), "tool_choice.type"),
    ("tool_use without input", body(messages=[USER, {"role": "assistant", "content": [
        {"type": "tool_use", "id": "t", "name": "Bash"}]}, USER]), "messages[1].content[0].input"),
    ("temperature not a number", body(temperature="hot"), "temperature"),
]


@pytest.mark.parametrize(("name", "request_body", "param"), REFUSALS, ids=[r[0] for r in REFUSALS])
def test_refusals_name_the_field(name: str, request_body: dict[str, Any], param: str) -> None:
    with pytest.raises(BadRequest) as refused:
        chat_of(request_body)
    assert refused.value.param == param and refused.value.status == 400
    assert param in refused.value.message


def test_count_tokens_takes_no_max_tokens_and_refuses_what_messages_refuses() -> None:
    assert ADAPTER.parse_count(orjson.dumps({"model": "m", "messages": [USER]}))["messages"] == [USER]
    assert ADAPTER.parse_count(orjson.dumps({"model": "m", "messages": [USER], "max_tokens": 9, "temperature": 1}))
    refused_fields = (({"logit_bias": {}}, "logit_bias"), ({"output_config": {"format": {}}}, "output_config.format"))
    for extra, param in refused_fields:
        with pytest.raises(BadRequest) as refused:
            ADAPTER.parse_count(orjson.dumps({"model": "m", "messages": [USER], **extra}))
        assert refused.value.param == param


RID = "msg_0123"


def answer(message: dict[str, Any], finish: str, stop_reason: Any = None) -> dict[str, Any]:
    return {"id": "chatcmpl-1", "prompt_token_ids": [1, 2, 3],
            "choices": [{"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish,
                         "stop_reason": stop_reason, "token_ids": [7, 8]}]}


def call(i: int, name: str, arguments: str) -> dict[str, Any]:
    return {"id": f"chatcmpl-tool-{i}", "type": "function", "function": {"name": name, "arguments": arguments}}


USAGE = {"input_tokens": 3, "output_tokens": 2, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
ANSWERS = [
    ("text", answer({"content": "done"}, "stop"), [{"type": "text", "text": "done"}], "end_turn", None),
    ("length", answer({"content": "do"}, "length"), [{"type": "text", "text": "do"}], "max_tokens", None),
    ("stop sequence", answer({"content": "x"}, "stop", "END"), [{"type": "text", "text": "x"}], "stop_sequence",
     "END"),
    ("eos token is no stop sequence", answer({"content": "x"}, "stop", 2), [{"type": "text", "text": "x"}],
     "end_turn", None),
    ("text and two tool calls", answer({"content": "Let me look.", "tool_calls": [
        call(0, "Bash", '{"command": "ls"}'), call(1, "Read", "{}")]}, "tool_calls"),
     [{"type": "text", "text": "Let me look."},
      {"type": "tool_use", "id": "toolu_0123_0", "name": "Bash", "input": {"command": "ls"}},
      {"type": "tool_use", "id": "toolu_0123_1", "name": "Read", "input": {}}], "tool_use", None),
    ("tool call only", answer({"content": None, "tool_calls": [call(0, "Bash", '{"command": "pwd"}')]}, "stop"),
     [{"type": "tool_use", "id": "toolu_0123_0", "name": "Bash", "input": {"command": "pwd"}}], "tool_use", None),
    ("empty", answer({"content": ""}, "stop"), [{"type": "text", "text": ""}], "end_turn", None),
]


@pytest.mark.parametrize(("name", "chat", "content", "reason", "sequence"), ANSWERS, ids=[a[0] for a in ANSWERS])
def test_chat_answer_to_message(name: str, chat: dict[str, Any], content: list, reason: str,
                                sequence: str | None) -> None:
    message = ADAPTER.from_chat(chat, body(stop_sequences=["END"]), RID)
    assert message == {"id": RID, "type": "message", "role": "assistant", "model": "claude-opus-5-5",
                       "content": content, "stop_reason": reason, "stop_sequence": sequence, "usage": USAGE}


@pytest.mark.parametrize("arguments", ['{"command": ', "[1, 2]", '"ls"', "not json at all"])
def test_tool_arguments_that_are_not_an_object_are_the_models_answer_as_text(arguments: str) -> None:
    """`tool_use.input` can only be an object: the call is answered as a text block holding it (arguments as a
    string), the turn ends, and the fault is reported for the record; the good call beside it stays a tool_use."""
    chat = answer({"content": "", "tool_calls": [call(0, "Bash", arguments), call(1, "Read", '{"path": "a"}')]},
                  "tool_calls")
    message = ADAPTER.from_chat(chat, body(), RID)
    assert message["content"] == [
        {"type": "text", "text": orjson.dumps({"name": "Bash", "arguments": arguments}).decode()},
        {"type": "tool_use", "id": "toolu_0123_1", "name": "Read", "input": {"path": "a"}}]
    assert message["stop_reason"] == "tool_use"
    fault = ADAPTER.model_fault(chat)
    assert fault.code == CallErrorCode.MODEL_TOOL_ARGUMENTS and "tool call 0" in fault.message
    alone = answer({"content": "ok", "tool_calls": [call(0, "Bash", arguments)]}, "tool_calls")
    message = ADAPTER.from_chat(alone, body(), RID)
    assert [b["type"] for b in message["content"]] == ["text", "text"] and message["stop_reason"] == "end_turn"
    assert ADAPTER.model_fault(answer({"content": "", "tool_calls": [call(0, "Read", "{}")]}, "tool_calls")) is None


def test_a_tool_call_off_the_chat_shapes_is_the_engines_failure() -> None:
    with pytest.raises(ProtocolError, match="must be strings"):
        ADAPTER.from_chat(answer({"content": "", "tool_calls": [
            {"id": "t", "function": {"name": "Bash", "arguments": {"command": "ls"}}}]}, "tool_calls"), body(), RID)
    with pytest.raises(ProtocolError, match="list of objects"):
        ADAPTER.from_chat(answer({"content": "", "tool_calls": ["ls"]}, "tool_calls"), body(), RID)


def chunk(delta: dict[str, Any] | None = None, finish: str | None = None, token_ids: list[int] | None = None,
          **top: Any) -> dict[str, Any]:
    choice: dict[str, Any] = {"index": 0, "delta": delta or {}, "finish_reason": finish}
    if token_ids is not None:
        choice["token_ids"] = token_ids
    return {"id": "chatcmpl-1", "object": "chat.completion.chunk", "choices": [choice], **top}


def tool_delta(index: int, **fields: Any) -> dict[str, Any]:
    return {"tool_calls": [{"index": index, **fields}]}


STREAM = [
    chunk({"role": "assistant", "content": ""}, prompt_token_ids=[1, 2, 3, 4]),
    chunk({"content": "Let me"}, token_ids=[10]),
    chunk({"content": " look."}, token_ids=[11]),
    chunk(tool_delta(0, id="chatcmpl-tool-a", type="function", function={"name": "Bash", "arguments": ""}),
          token_ids=[12]),
    chunk(tool_delta(0, function={"arguments": '{"command"'}), token_ids=[13]),
    chunk(tool_delta(0, function={"arguments": ': "ls"}'}), token_ids=[14]),
    chunk(tool_delta(1, id="chatcmpl-tool-b", type="function", function={"name": "Read", "arguments": "{}"}),
          token_ids=[15]),
    chunk(finish="tool_calls", token_ids=[16]),
]


def events_of(raw: bytes) -> list[tuple[str, dict[str, Any]]]:
    """(event name, data) of each SSE event, checking every event's name matches its data's type."""
    events = []
    for block in raw.decode().split("\n\n"):
        if not block:
            continue
        head, data = block.split("\n")
        name, payload = head.removeprefix("event: "), orjson.loads(data.removeprefix("data: "))
        assert payload["type"] == name
        events.append((name, payload))
    return events


def test_stream_chunks_to_events_a_text_block_then_two_tool_use_blocks() -> None:
    """Text streams live; the tool calls are held and go out whole with the closing events (one input delta each)."""
    translator = ADAPTER.stream(body(), RID)
    sent = b"".join(translator.feed(c) for c in STREAM)
    closing = translator.finish()
    shape = [(n, e.get("index"), (e.get("delta") or e.get("content_block") or {}).get("type"))
             for n, e in events_of(sent + closing)]
    assert shape == [
        ("message_start", None, None),
        ("content_block_start", 0, "text"), ("content_block_delta", 0, "text_delta"),
        ("content_block_delta", 0, "text_delta"), ("content_block_stop", 0, None),
        ("content_block_start", 1, "tool_use"), ("content_block_delta", 1, "input_json_delta"),
        ("content_block_stop", 1, None),
        ("content_block_start", 2, "tool_use"), ("content_block_delta", 2, "input_json_delta"),
        ("content_block_stop", 2, None), ("message_delta", None, None), ("message_stop", None, None)]
    assert len(events_of(sent)) == 5  # up to the text block's stop, sent when the first call began
    start = events_of(sent)[0][1]["message"]
    assert start["id"] == RID and start["usage"]["input_tokens"] == 4 and start["content"] == []
    tools = [e["content_block"] for n, e in events_of(closing) if n == "content_block_start"]
    assert tools == [{"type": "tool_use", "id": "toolu_0123_0", "name": "Bash", "input": {}},
                     {"type": "tool_use", "id": "toolu_0123_1", "name": "Read", "input": {}}]
    json_parts = [e["delta"]["partial_json"] for n, e in events_of(closing) if n == "content_block_delta"]
    assert json_parts == ['{"command": "ls"}', "{}"]
    assert events_of(closing)[-2:] == [
        ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": None},
                           "usage": {"output_tokens": 7}}),
        ("message_stop", {"type": "message_stop"})]
    assert translator.model_fault is None


def test_stream_stop_sequence_and_an_empty_stream() -> None:
    translator = ADAPTER.stream(body(stop_sequences=["END"]), RID)
    translator.feed(chunk({"content": "x"}, prompt_token_ids=[1], token_ids=[5]))
    translator.feed({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop", "stop_reason": "END"}]})
    delta = dict(events_of(translator.finish()))["message_delta"]
    assert delta["delta"] == {"stop_reason": "stop_sequence", "stop_sequence": "END"}
    empty = events_of(ADAPTER.stream(body(), RID).finish())
    assert [n for n, _ in empty] == ["message_start", "message_delta", "message_stop"]


def test_a_stream_whose_tool_arguments_are_not_json_closes_with_the_call_as_text() -> None:
    translator = ADAPTER.stream(body(), RID)
    sent = translator.feed(chunk({"content": "run:"}, prompt_token_ids=[1]))
    sent += translator.feed(chunk(tool_delta(0, id="t", function={"name": "Bash", "arguments": '{"command": '})))
    sent += translator.feed(chunk(tool_delta(0, function={"arguments": '"ls'}), finish="length"))
    assert translator.model_fault is None  # known only once the call is whole
    closing = translator.finish()
    blocks = [e["content_block"] for n, e in events_of(sent + closing) if n == "content_block_start"]
    assert blocks == [{"type": "text", "text": ""}, {"type": "text", "text": ""}]
    texts = [e["delta"]["text"] for n, e in events_of(closing) if n == "content_block_delta"]
    assert texts == [orjson.dumps({"name": "Bash", "arguments": '{"command": "ls'}).decode()]
    assert dict(events_of(closing))["message_delta"]["delta"]["stop_reason"] == "max_tokens"
    assert translator.model_fault.code == CallErrorCode.MODEL_TOOL_ARGUMENTS
    ((name, data),) = events_of(ADAPTER.stream(body(), RID).error("broken", "upstream_protocol_error"))
    assert name == "error" and data["error"]["type"] == "api_error" and "broken" in data["error"]["message"]


@pytest.mark.parametrize(("status", "kind"), [
    (400, "invalid_request_error"), (401, "authentication_error"), (403, "permission_error"),
    (404, "not_found_error"), (409, "invalid_request_error"), (413, "request_too_large"),
    (429, "rate_limit_error"), (500, "api_error"), (502, "api_error"), (503, "overloaded_error")])
def test_errors_in_anthropic_shape(status: int, kind: str) -> None:
    assert orjson.loads(ADAPTER.error_body(status, "what went wrong", "some_code")) == {
        "type": "error", "error": {"type": kind, "message": "what went wrong [some_code]"}}
    assert error_object(status, "m", None)["error"]["message"] == "m"


def test_response_ids_are_distinct_and_fixed() -> None:
    ids = {ADAPTER.response_id(r, a, s) for r in ("r1", "r2") for a in (0, 1) for s in (0, 1, 2)}
    assert len(ids) == 12 and all(i.startswith("msg_") for i in ids)
    assert ADAPTER.response_id("r1", 0, 0) == ADAPTER.response_id("r1", 0, 0)


@pytest.mark.parametrize("text", ["t", 'quote " and \\ back', "line\nbreak", "é ☃ \U0001f600", ""])
def test_text_deltas_are_built_byte_for_byte_as_events(text: str) -> None:
    from gateway.protocols.anthropic_answer import _text_delta, sse

    assert _text_delta(7, text) == sse("content_block_delta", {
        "type": "content_block_delta", "index": 7, "delta": {"type": "text_delta", "text": text}})
