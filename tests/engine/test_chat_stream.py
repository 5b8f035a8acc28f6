"""Tool calls in the response builders, fed token events (the tiny model's random weights never emit calls)."""

from __future__ import annotations

import itertools
import json

from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types.chat import ChatCompletionChunk

from engines.serving.chat_stream import ChatStreamAssembler
from engines.serving.responses import ChoiceLog, ResponseMeta, chat_body, chat_role_chunk
from engines.serving.scheduler import TokenEvent
from engines.serving.tool_parser import parse_tool_calls

META = ResponseMeta("chatcmpl-test", "tiny", 3)
CALL = '<tool_call>\n{"name": "add", "arguments": {"a": 1}}\n</tool_call>'
PIECES = ["I will", " add.", "\n<tool", "_call>\n", '{"name": "add", ', '"arguments": {"a": 1}}', "\n</tool_call>",
          "\n<tool_call>{bad}</tool_call>", ""]


def ids():
    counter = itertools.count()
    return lambda: f"call_{next(counter)}"


def token_text(token_id: int) -> str:
    return f"<t{token_id}>"


def events(pieces: list[str], finish_reason: str = "stop", choice: int = 0) -> list[TokenEvent]:
    last = len(pieces) - 1
    return [TokenEvent(choice, 100 + i, -0.5 - i, ((100 + i, -0.5 - i),), piece,
                       finish_reason if i == last else None, None) for i, piece in enumerate(pieces)]


def assembled(pieces: list[str], parse: bool = True, n: int = 1) -> tuple[list[dict], ChatStreamAssembler]:
    assembler = ChatStreamAssembler(META, n, token_text, with_logprobs=True, with_token_ids=True,
                                    parse_tool_calls=parse, make_call_id=ids())
    return [assembler.token_chunk(0, e)["choices"][0] for e in events(pieces)], assembler


def test_stream_holds_back_a_possible_tag_and_sends_each_call_whole() -> None:
    chunks, assembler = assembled(PIECES)
    contents = [c["delta"].get("content") for c in chunks]
    assert contents[:3] == ["I will", " add.", ""]
    assert [c["delta"].get("tool_calls") for c in chunks][6] == [
        {"index": 0, "id": "call_0", "type": "function", "function": {"name": "add", "arguments": '{"a": 1}'}}]
    assert "content" not in chunks[6]["delta"]
    streamed = "".join(c["delta"].get("content") or "" for c in chunks)
    whole = parse_tool_calls("".join(PIECES), ids())
    assert streamed == whole.content == "I will add.<tool_call>{bad}</tool_call>"  # space by the call trimmed
    assert chunks[-1]["finish_reason"] == "tool_calls" and chunks[-1]["tool_call_parse_failures"] == 1
    assert all(c["finish_reason"] is None for c in chunks[:-1])
    assert assembler.parse_failures == 1


def test_stream_token_ids_and_logprobs_are_the_raw_tokens() -> None:
    chunks, _ = assembled(PIECES)
    assert [c["token_ids"] for c in chunks] == [[100 + i] for i in range(len(PIECES))]
    assert [c["logprobs"]["content"][0]["logprob"] for c in chunks] == [-0.5 - i for i in range(len(PIECES))]


def test_stream_second_call_gets_the_next_index() -> None:
    chunks, _ = assembled([CALL, "\n", CALL.replace('"a": 1', '"a": 2'), ""])
    calls = [call for c in chunks for call in c["delta"].get("tool_calls", [])]
    assert [(c["index"], c["id"], json.loads(c["function"]["arguments"])) for c in calls] == [
        (0, "call_0", {"a": 1}), (1, "call_1", {"a": 2})]


def test_stream_without_parsing_sends_text_as_it_comes() -> None:
    chunks, assembler = assembled(PIECES, parse=False)
    assert [c["delta"]["content"] for c in chunks] == PIECES
    assert chunks[-1]["finish_reason"] == "stop" and "tool_call_parse_failures" not in chunks[-1]
    assert assembler.parse_failures == 0


def test_stream_without_calls_keeps_the_finish_reason() -> None:
    chunks, _ = assembled(["plain ", "text <", "b>"])
    assert "".join(c["delta"]["content"] for c in chunks) == "plain text <b>"
    assert chunks[-1]["finish_reason"] == "stop" and chunks[-1]["tool_call_parse_failures"] == 0


def choice_log(pieces: list[str], finish_reason: str = "stop") -> ChoiceLog:
    log = ChoiceLog()
    for event in events(pieces, finish_reason):
        log.add(event)
    return log


def test_chat_body_with_parsed_calls_answers_tool_calls_and_keeps_tokens() -> None:
    logs = [choice_log([CALL, "\n", CALL]), choice_log(["no", " call"], "length")]
    parsed = [parse_tool_calls(log.text, ids()) for log in logs]
    body = chat_body(META, logs, [1, 2, 3], token_text, True, True, parsed)
    first, second = body["choices"]
    assert first["message"]["content"] is None and first["finish_reason"] == "tool_calls"
    assert [c["function"]["name"] for c in first["message"]["tool_calls"]] == ["add", "add"]
    assert [c["id"] for c in first["message"]["tool_calls"]] == ["call_0", "call_1"]
    assert first["token_ids"] == [100, 101, 102] and len(first["logprobs"]["content"]) == 3
    assert second["message"] == {"role": "assistant", "content": "no call", "tool_calls": [],
                                 "reasoning_content": None}
    assert second["finish_reason"] == "length" and second["tool_call_parse_failures"] == 0
    assert body["usage"]["completion_tokens"] == 5


def test_chat_body_without_parsing_leaves_the_text_alone() -> None:
    body = chat_body(META, [choice_log([CALL])], [1], token_text, False, False)
    [choice] = body["choices"]
    assert choice["message"]["content"] == CALL and choice["message"]["tool_calls"] == []
    assert choice["finish_reason"] == "stop" and "tool_call_parse_failures" not in choice


def test_the_openai_sdk_accumulates_the_streamed_calls() -> None:
    assembler = ChatStreamAssembler(META, 1, token_text, with_logprobs=False, with_token_ids=False,
                                    parse_tool_calls=True, make_call_id=ids())
    state = ChatCompletionStreamState()
    state.handle_chunk(ChatCompletionChunk.model_validate(chat_role_chunk(META, 0, None)))
    for event in events(PIECES):
        state.handle_chunk(ChatCompletionChunk.model_validate(assembler.token_chunk(0, event)))
    [choice] = state.get_final_completion().choices
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content == "I will add.<tool_call>{bad}</tool_call>"
    assert [(c.id, c.function.name, c.function.arguments) for c in choice.message.tool_calls] == [
        ("call_0", "add", '{"a": 1}')]
