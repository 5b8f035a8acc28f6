"""`tool_choice` enforcement, its pure parts: reading and checking the choice, the forced prompt's plan, the
function-name constraint, parsing a forced answer, and the streamed chunks of one (fast tier, no model)."""

from __future__ import annotations

import itertools
import json
import math

import pytest
import torch
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types.chat import ChatCompletionChunk

from engines.serving.chat_stream import ChatStreamAssembler
from engines.serving.forced_call import ForcingError, call_opening, function_openings, plan_forced_call
from engines.serving.prefix_constraint import allowed_next_tokens, constrain_logits_BV
from engines.serving.responses import (
    CONSTRAINED_TOKENS_FIELD,
    FORCED_TOKENS_FIELD,
    ChoiceLog,
    ResponseMeta,
    chat_body,
    chat_role_chunk,
)
from engines.serving.scheduler import TokenEvent
from engines.serving.tool_choice import ToolChoice, ToolChoiceError, answer_finish_reason, read_tool_choice
from engines.serving.tool_parser import parse_tool_calls


def tool(name: str) -> dict:
    return {"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}


TOOLS = [tool("add"), tool("multiply"), {"type": "web_search"}, tool("add")]
NAMED = {"type": "function", "function": {"name": "multiply"}}
META = ResponseMeta("chatcmpl-test", "tiny", 0)


def ids():
    counter = itertools.count()
    return lambda: f"call_{next(counter)}"


# --- reading tool_choice -------------------------------------------------------------------------------------------

def test_auto_and_none_force_nothing_with_or_without_tools() -> None:
    assert read_tool_choice(None, TOOLS) == ToolChoice("auto", (), True)
    assert read_tool_choice("none", TOOLS) == ToolChoice("none", (), True)
    assert not read_tool_choice("none", TOOLS).parses_calls and read_tool_choice("auto", TOOLS).parses_calls
    assert read_tool_choice("auto", None) == ToolChoice("auto", (), False)
    assert not read_tool_choice("auto", None).parses_calls and not read_tool_choice("auto", None).forces_call


def test_required_may_call_every_declared_function_and_a_named_choice_only_its_own() -> None:
    required = read_tool_choice("required", TOOLS)
    assert required == ToolChoice("required", ("add", "multiply"), True) and required.forces_call
    assert read_tool_choice(NAMED, TOOLS) == ToolChoice("function", ("multiply",), True)


@pytest.mark.parametrize(("choice", "tools", "param", "words"), [
    ("required", None, "tool_choice", "declares none"),
    ("required", [{"type": "web_search"}], "tool_choice", "declares none"),
    (NAMED, [tool("add")], "tool_choice", "'multiply', which is not among the request's tools ['add']"),
    (NAMED, None, "tool_choice", "not among the request's tools []"),
    ({"type": "function"}, TOOLS, "tool_choice.function", '"function": {"name": "my_function"}'),
    ({"type": "function", "function": {"name": ""}}, TOOLS, "tool_choice.function.name", "non-empty string"),
    ("any", TOOLS, "tool_choice", "'any' is not supported; use 'none', 'auto', 'required'"),
])
def test_invalid_choices_are_refused_naming_the_value_and_the_fix(choice, tools, param, words) -> None:
    with pytest.raises(ToolChoiceError) as error:
        read_tool_choice(choice, tools)
    assert words in str(error.value) and error.value.param == param


@pytest.mark.parametrize(("mode", "model", "calls", "expected"), [
    ("auto", "stop", True, "tool_calls"), ("auto", "length", True, "tool_calls"), ("auto", "stop", False, "stop"),
    ("required", "stop", True, "tool_calls"), ("required", "length", True, "length"),
    ("function", "stop", True, "stop"), ("function", "length", True, "length"), ("auto", None, True, None),
])
def test_finish_reasons_follow_openai_and_vllm(mode, model, calls, expected) -> None:
    assert answer_finish_reason(ToolChoice(mode, ("f",), True), model, calls) == expected


# --- the forced prompt ---------------------------------------------------------------------------------------------

def encode(text: str) -> list[int]:
    """A toy tokenizer: one token per character."""
    return [ord(c) for c in text]


def decode(ids: list[int]) -> str:
    return "".join(chr(i) for i in ids)


def schema(*keys: str, required: tuple[str, ...] | None = None) -> dict:
    return {"type": "object", "properties": {key: {"type": "integer"} for key in keys},
            "required": list(keys if required is None else required)}


def test_an_opening_runs_to_the_first_declared_argument_when_it_is_required() -> None:
    head = '<tool_call>\n{"name": "add", "arguments":'
    assert call_opening("add", schema("a", "b")) == head + ' {"a":'
    assert call_opening("add", schema("a", "b", required=("b",))) == head
    assert call_opening("add", schema("_a", "b")) == head  # ' {"_' is one pre-token: the boundary would move
    assert call_opening("add", {"type": "object"}) == call_opening("add") == head
    assert call_opening("add", {"properties": {"e": {"type": "string"}}, "required": ["e"]}) == head + ' {"e": "'
    tools = [tool("add"), {"type": "function", "function": {"name": "sub", "parameters": schema("x")}}]
    assert function_openings(tools, ("sub", "add")) == (call_opening("sub", schema("x")), head)


def test_one_function_forces_its_whole_opening_into_the_prompt() -> None:
    opening = call_opening("add", schema("a"))
    forced = plan_forced_call(encode, decode, "<chat>", encode("<chat>"), ("add",), (opening,))
    assert forced.prompt_ids == tuple(encode("<chat>" + opening))
    assert forced.forced_text == opening and forced.forced_tokens == len(opening)
    assert forced.continuations == ()


def test_several_functions_force_the_shared_opening_and_leave_the_names_to_choose() -> None:
    names = ("add", "add_two", "multiply")
    forced = plan_forced_call(encode, decode, "<chat>", encode("<chat>"), names, tuple(map(call_opening, names)))
    assert forced.forced_text == '<tool_call>\n{"name": "'
    assert forced.prompt_ids == tuple(encode('<chat><tool_call>\n{"name": "'))
    assert [decode(list(c)) for c in forced.continuations] == [
        'add", "arguments":', 'add_two", "arguments":', 'multiply", "arguments":']


def test_a_tokenizer_that_does_not_decode_the_prompt_back_is_refused() -> None:
    with pytest.raises(ForcingError, match="use tool_choice 'auto'"):
        plan_forced_call(encode, lambda ids: decode(ids).upper(), "<chat>", encode("<chat>"), ("add",),
                         (call_opening("add"),))


# --- the function-name constraint ----------------------------------------------------------------------------------

def test_allowed_tokens_follow_the_continuations_until_one_is_complete() -> None:
    continuations = ((5, 6, 9), (5, 7), (8,))
    assert allowed_next_tokens((), [1, 2]) is None
    assert allowed_next_tokens(continuations, []) == (5, 8)
    assert allowed_next_tokens(continuations, [5]) == (6, 7)
    assert allowed_next_tokens(continuations, [5, 6]) == (9,)
    assert allowed_next_tokens(continuations, [5, 7]) is None
    assert allowed_next_tokens(continuations, [5, 7, 1, 2]) is None
    assert allowed_next_tokens(continuations, [8, 3]) is None
    with pytest.raises(ValueError, match="left every constrained continuation"):
        allowed_next_tokens(continuations, [6])


def test_constrained_rows_keep_only_their_allowed_logits() -> None:
    logits_BV = torch.arange(12, dtype=torch.float32).reshape(2, 6)
    assert constrain_logits_BV(logits_BV, [None, None]) is logits_BV
    constrained_BV = constrain_logits_BV(logits_BV, [None, (1, 4)])
    assert torch.equal(constrained_BV[0], logits_BV[0])
    assert constrained_BV[1].tolist() == [-math.inf, 7.0, -math.inf, -math.inf, 10.0, -math.inf]
    assert logits_BV[1].tolist() == [6.0, 7.0, 8.0, 9.0, 10.0, 11.0]


# --- parsing a forced answer ---------------------------------------------------------------------------------------

OPENING = call_opening("add")


def test_a_forced_call_the_model_completed_parses_as_any_call() -> None:
    parsed = parse_tool_calls(OPENING + ' {"a": 1}}\n</tool_call>', ids(), forced_names=("add",))
    assert [(c.name, c.arguments) for c in parsed.tool_calls] == [("add", '{"a": 1}')]
    assert parsed.content is None and parsed.parse_failures == 0


def test_a_forced_call_is_a_call_even_when_the_model_broke_its_json() -> None:
    recovered = parse_tool_calls(OPENING + ' {"a": 1}\n</tool_call> after', ids(), forced_names=("add",))
    assert [(c.name, c.arguments) for c in recovered.tool_calls] == [("add", '{"a": 1}')]
    assert recovered.content == "after" and recovered.parse_failures == 0
    raw = parse_tool_calls(OPENING + " bananas and", ids(), forced_names=("add", "multiply"))
    assert [(c.name, c.arguments) for c in raw.tool_calls] == [("add", "bananas and")]
    assert raw.content is None and raw.parse_failures == 1


def test_only_the_forced_block_is_forced() -> None:
    second = OPENING + " broken</tool_call>"
    parsed = parse_tool_calls(OPENING + ' {"a": 1}}\n</tool_call>\n' + second, ids(), forced_names=("add",))
    assert [c.arguments for c in parsed.tool_calls] == ['{"a": 1}']
    assert parsed.content == second and parsed.parse_failures == 1
    cut_in_the_name = parse_tool_calls('<tool_call>\n{"name": "ad', ids(), forced_names=("add", "adder"))
    assert cut_in_the_name.tool_calls == () and cut_in_the_name.parse_failures == 1
    unforced = parse_tool_calls(OPENING + " bananas", ids())
    assert unforced.tool_calls == () and unforced.parse_failures == 1


# --- the answer's shapes -------------------------------------------------------------------------------------------

def events(pieces: list[str], constrained: int = 0) -> list[TokenEvent]:
    last = len(pieces) - 1
    return [TokenEvent(0, 100 + i, math.nan if i < constrained else -0.5, (), piece,
                       "stop" if i == last else None, None, i < constrained) for i, piece in enumerate(pieces)]


PIECES = ['multiply", "arguments":', ' {"a":', " 2}}", "\n</tool_call>", ""]
REQUIRED = ToolChoice("required", ("add", "multiply"), True)
OPEN = '<tool_call>\n{"name": "'


def test_a_forced_answer_reports_its_forced_and_constrained_tokens() -> None:
    log = ChoiceLog()
    for event in events(PIECES, constrained=1):
        log.add(event)
    parsed = [parse_tool_calls(OPEN + log.text, ids(), forced_names=REQUIRED.names)]
    body = chat_body(META, [log], [1, 2, 3], str, True, True, parsed, REQUIRED, forced_tokens=2)
    [choice] = body["choices"]
    assert body[FORCED_TOKENS_FIELD] == 2 and body["usage"] == {"prompt_tokens": 3, "completion_tokens": 5,
                                                                "total_tokens": 8}
    assert choice[CONSTRAINED_TOKENS_FIELD] == 1 and choice["finish_reason"] == "tool_calls"
    logprobs = [e["logprob"] for e in choice["logprobs"]["content"]]
    assert math.isnan(logprobs[0]) and logprobs[1:] == [-0.5] * 4
    assert choice["message"]["tool_calls"][0]["function"] == {"name": "multiply", "arguments": '{"a": 2}'}
    assert FORCED_TOKENS_FIELD not in chat_body(META, [log], [1], str, True, True)


def test_the_streamed_forced_call_is_the_whole_one_and_the_sdk_reads_it() -> None:
    assembler = ChatStreamAssembler(META, 1, str, with_logprobs=True, with_token_ids=True, parse_tool_calls=True,
                                    make_call_id=ids(), tool_choice=REQUIRED, forced_text=OPEN)
    role = chat_role_chunk(META, 0, [1, 2, 3], forced_tokens=2)
    assert role[FORCED_TOKENS_FIELD] == 2 and role["prompt_token_ids"] == [1, 2, 3]
    chunks = [assembler.token_chunk(0, event) for event in events(PIECES, constrained=1)]
    state = ChatCompletionStreamState()
    for chunk in [role, *chunks]:
        state.handle_chunk(ChatCompletionChunk.model_validate(chunk))
    [choice] = state.get_final_completion().choices
    assert [(c.function.name, json.loads(c.function.arguments)) for c in choice.message.tool_calls] == [
        ("multiply", {"a": 2})]
    last = chunks[-1]["choices"][0]
    assert last["finish_reason"] == "tool_calls" and last[CONSTRAINED_TOKENS_FIELD] == 1
    assert [c["choices"][0]["token_ids"] for c in chunks] == [[100 + i] for i in range(len(PIECES))]


def test_a_named_call_finishes_with_stop_as_openai_answers() -> None:
    named = ToolChoice("function", ("add",), True)
    assembler = ChatStreamAssembler(META, 1, str, with_logprobs=False, with_token_ids=False, parse_tool_calls=True,
                                    make_call_id=ids(), tool_choice=named, forced_text=OPENING)
    chunks = [assembler.token_chunk(0, e)["choices"][0] for e in events([' {"a": 1}}', "\n</tool_call>", ""])]
    assert chunks[1]["delta"]["tool_calls"][0]["function"] == {"name": "add", "arguments": '{"a": 1}'}
    assert chunks[-1]["finish_reason"] == "stop" and chunks[-1][CONSTRAINED_TOKENS_FIELD] == 0
