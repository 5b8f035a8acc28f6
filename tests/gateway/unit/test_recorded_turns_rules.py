"""The pure rules of recorded turns (gateway/recorded_turns.py): when a re-sent turn is the recorded one, which
earlier calls may be continued, and how the recorded tokens are spliced into the engine's rendering."""

from __future__ import annotations

import json

import pytest

from gateway.protocols.anthropic import ADAPTER
from gateway.recorded_turns import (
    MAX_CANDIDATES,
    candidates,
    continues,
    same_arguments,
    same_turn,
    spliced,
    spliced_cut,
)
from gateway.records import CallRecord, CallStatus

EDIT = {"replace_all": {"type": "boolean", "default": False}, "file_path": {"type": "string"}}
ARGS = json.dumps({"file_path": "a.py", "old_string": "x", "new_string": "y"})


@pytest.mark.parametrize(("sent", "same"), [
    (ARGS, True),
    (json.dumps({"new_string": "y", "old_string": "x", "file_path": "a.py"}, indent=1), True),  # order, spacing
    (json.dumps({"replace_all": False, "file_path": "a.py", "old_string": "x", "new_string": "y"}), True),
    (json.dumps({"replace_all": True, "file_path": "a.py", "old_string": "x", "new_string": "y"}), False),
    (json.dumps({"force": False, "file_path": "a.py", "old_string": "x", "new_string": "y"}), False),  # no default
    (json.dumps({"file_path": "a.py", "old_string": "x"}), False),  # a recorded key dropped
    (json.dumps({"file_path": "a.py", "old_string": "x", "new_string": "z"}), False),
    ("not json", False),
])
def test_re_sent_arguments_are_the_recorded_ones_only_up_to_defaulted_keys_and_serialisation(sent, same):
    assert same_arguments(sent, ARGS, EDIT) is same


def call(call_id: str = "toolu_1", name: str = "Edit", arguments: str = ARGS) -> dict:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def test_a_turn_is_the_same_with_its_text_trimmed_and_never_with_another_call():
    recorded = {"role": "assistant", "content": "Fixing.\n", "tool_calls": [call()]}
    properties = {"Edit": EDIT}
    assert same_turn({**recorded, "content": "Fixing."}, recorded, properties)
    assert not same_turn({**recorded, "content": "Fixed."}, recorded, properties)
    assert not same_turn({**recorded, "tool_calls": [call("toolu_2")]}, recorded, properties)
    assert not same_turn({**recorded, "tool_calls": [call(name="Write")]}, recorded, properties)
    assert not same_turn({**recorded, "tool_calls": [call(), call("toolu_2")]}, recorded, properties)
    assert not same_turn({"role": "tool", "tool_call_id": "t", "content": "a "}, {"role": "tool", "tool_call_id": "t",
                                                                                   "content": "a"}, properties)


def test_a_conversation_continues_an_earlier_one_with_its_tools_its_messages_and_its_answer_then_more():
    tools = [{"type": "function", "function": {"name": "Edit", "parameters": {"properties": EDIT}}}]
    earlier = {"messages": [{"role": "user", "content": "fix"}], "tools": tools}
    answer = {"role": "assistant", "content": "", "tool_calls": [call()]}
    result = {"role": "tool", "tool_call_id": "toolu_1", "content": "ok"}
    assert continues({"messages": [*earlier["messages"], answer, result], "tools": tools}, earlier, answer)
    assert not continues({"messages": [*earlier["messages"], answer], "tools": tools}, earlier, answer)
    assert not continues({"messages": [*earlier["messages"], answer, result], "tools": []}, earlier, answer)
    assert not continues({"messages": [{"role": "user", "content": "fix!"}, answer, result], "tools": tools},
                         earlier, answer)


def record(seq: int, **fields) -> CallRecord:
    base = {"id": seq, "rollout_id": "r", "attempt": 1, "seq": seq, "kind": "messages", "stream": False,
            "model": "m", "upstream": None, "status": CallStatus.OK, "http_status": 200, "error": None,
            "request": {}, "response_raw": None, "response_id": None, "prompt_token_ids": [1],
            "response_token_ids": [2], "response_logprobs": [0.0], "response_text": None, "finish_reason": "stop",
            "n_choices": 1, "policy_version": 0, "latency_ms": 1.0, "created_at": 0.0}
    return CallRecord(**(base | fields))


def test_candidates_are_the_latest_whole_main_answers_of_the_protocol():
    latest = [record(6), record(5, response_token_ids=[], response_logprobs=[]), record(4, finish_reason="length"),
              record(3, request={"stop_sequences": ["END"]})]
    assert [c.seq for c in candidates(latest, "messages")] == [6, 4]  # a cut answer too (`spliced_cut`)
    others = [record(9, request={"stop": "x"}), record(8, side=True), record(7, status=CallStatus.ERROR),
              record(2, kind="responses")]
    assert [c.seq for c in candidates(others, "messages")] == []  # the store's answer is filtered again
    many = [record(seq) for seq in range(19, -1, -1)]
    assert [c.seq for c in candidates(many, "messages")] == list(range(19, 19 - MAX_CANDIDATES, -1))


END, NL = 2, 99
OPENED = [10, 11, 2, 99, 12]  # the earlier messages (one closed by END, NL) with the generation prompt
TURN = [50, 51, END, NL]  # its answer's turn as the template renders it, closed
LONG = [91, 92, 93, 94, 95]


def test_the_recorded_prompt_and_answer_then_the_bridge_then_the_rest_as_rendered():
    prompt, answer = [*OPENED, 5], [60, 61, 62, END]  # its own prompt (a forced opening) and answer as sampled
    closed, tail = [*OPENED, *TURN], [70, 71, 72]
    assert spliced(prompt, answer, OPENED, closed, [*closed, *tail]) == [*prompt, *answer, NL, *tail]


@pytest.mark.parametrize(("answer", "closed", "whole"), [
    ([60, 61], [*OPENED, *TURN], [*OPENED, *TURN, 70]),  # no end-of-turn token: cut short
    ([60, 51], [*OPENED, *TURN], [*OPENED, *TURN, 70]),  # its last token is content: never taken for the end
    ([END, 60, END], [*OPENED, *TURN], [*OPENED, *TURN, 70]),  # the end token inside the answer
    ([60, END], [*OPENED, *TURN], [*OPENED, 50, 70]),  # the new rendering does not extend the turn
    ([60, END], [9, *TURN], [9, *TURN, 70]),  # the closed rendering does not extend the opened one
    ([60, END], [*OPENED, 50, END, 98], [*OPENED, 50, END, 98, 70]),  # closed otherwise than the message before
    ([60, END], [*OPENED, 50, END, *LONG], [*OPENED, 50, END, *LONG, 70]),  # a bridge past 4 tokens
    ([], [*OPENED, *TURN], [*OPENED, *TURN, 70]),
])
def test_renderings_that_do_not_line_up_give_no_recorded_prompt(answer, closed, whole):
    assert spliced(OPENED, answer, OPENED, closed, whole) is None


EMPTY = [*OPENED, END, NL]  # an empty assistant turn after the generation prompt: the template's closing


def test_a_cut_answer_is_followed_by_the_templates_closing_of_a_turn():
    prompt, answer = [*OPENED, 5], [60, 61, 62]  # cut: no end-of-turn token
    closed, tail = [*OPENED, *TURN], [70, 71, 72]
    assert spliced_cut(prompt, answer, OPENED, closed, [*closed, *tail], EMPTY) == [*prompt, *answer, END, NL, *tail]


@pytest.mark.parametrize(("answer", "closed", "whole", "empty"), [
    ([60, END, 61], [*OPENED, *TURN], [*OPENED, *TURN, 70], EMPTY),  # the end-of-turn token inside the answer
    ([60, 61], [*OPENED, 50, 51, NL], [*OPENED, 50, 51, NL, 70], EMPTY),  # the turn not closed as an empty one
    ([60, 61], [*OPENED, *TURN], [*OPENED, *TURN, 70], [9, *OPENED, END, NL]),  # D does not extend A
    ([60, 61], [*OPENED, *TURN], [*OPENED, *TURN, 70], OPENED),  # no closing rendered
    ([60, 61], [*OPENED, 50, *LONG, END], [*OPENED, 50, *LONG, END, 70], [*OPENED, *LONG, END]),  # past 4 + 1
    ([60, 61], [*OPENED, 50, 98, NL], [*OPENED, 50, 98, NL, 70], [*OPENED, 98, NL]),  # not how A closed a message
    ([60, 61], [*OPENED, END, NL], [*OPENED, END, NL, 70], EMPTY),  # the answer's turn holds nothing but the closing
    ([60, 61], [*OPENED, *TURN], [*OPENED, 50, 70], EMPTY),  # the new rendering does not extend the turn
    ([60, 61], [9, *TURN], [9, *TURN, 70], EMPTY),  # the closed rendering does not extend the opened one
    ([], [*OPENED, *TURN], [*OPENED, *TURN, 70], EMPTY),
    ([60, END], [*OPENED, *TURN], [*OPENED, *TURN, 70], EMPTY),  # `length` on its end-of-turn token (vLLM's order)
    # each check alone: the other renderings line up, only the one named does not
    ([60, 61], [*OPENED, *TURN], [*OPENED, *TURN, 70], [9, *OPENED[1:], END, NL]),  # D's closing, D not after A
    ([60, 61], [9, *OPENED[1:], *TURN], [9, *OPENED[1:], *TURN, 70], EMPTY),  # B as long as A and a turn, not after it
])
def test_a_cut_answers_renderings_that_do_not_line_up_give_no_recorded_prompt(answer, closed, whole, empty):
    assert spliced_cut(OPENED, answer, OPENED, closed, whole, empty) is None


@pytest.mark.parametrize(("length", "spliced_in"), [(5, True), (6, False)])
def test_a_cut_answers_closing_is_at_most_4_plus_1_tokens_even_where_the_message_before_is_closed_so(length,
                                                                                                    spliced_in):
    closing = [END, *LONG][:length]  # the message before the answer closed the same way: only the bound refuses it
    opened = [10, *closing, 12]
    closed, tail = [*opened, 50, *closing], [70]
    expected = [*opened, 60, 61, *closing, *tail] if spliced_in else None
    assert spliced_cut(opened, [60, 61], opened, closed, [*closed, *tail], [*opened, *closing]) == expected


def test_what_a_template_writes_at_the_head_of_a_turn_is_never_taken_for_its_closing():
    """A template that opens each assistant turn after the last user query with a filler (an empty think block,
    THINK) renders an empty turn as filler then closing, all of it after the generation prompt. A policy whose cut
    text ends with the filler's text in plain pieces (PIECES, never THINK itself), and a harness whose last message
    ends with that text, make the turn end with filler and closing and the message before close the same way: the
    filler would follow the answer, which already holds its text (sampled), a second time (neither sampled nor where
    the engine renders it). The closing's first token is found once in the turn, at its end, or nothing is spliced."""
    think, pieces = 80, 81
    opened = [10, 11, think, END, NL, 12]  # the harness's message ends with the filler's text, rendered as THINK
    answer = [60, 61, pieces]  # cut; the filler's text in plain pieces
    closed = [*opened, think, 60, 61, think, END, NL]  # the turn: the filler, the text (its end re-tokenized), closing
    empty = [*opened, think, END, NL]  # an empty turn: the filler, then the closing
    assert spliced_cut(opened, answer, opened, closed, [*closed, 70], empty) is None


def test_a_messages_answer_is_the_same_chat_turn_whether_unary_or_streamed():
    chat = {"id": "c", "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
        "role": "assistant", "content": "Fixing.", "tool_calls": [call("call_1")]}}], "usage": {}}
    unary = json.dumps(ADAPTER.from_chat(chat, {"messages": []}, "msg_1"))
    stream = ADAPTER.stream({"messages": []}, "msg_1")
    chunk = {"id": "c", "choices": [{"index": 0, "delta": {"content": "Fixing."}}]}
    calls = {"id": "c", "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, **call("call_1")}]},
                                     "finish_reason": "tool_calls"}]}
    sse = stream.feed(chunk) + stream.feed(calls) + stream.finish()
    turn = ADAPTER.answer_turn(unary)
    assert ADAPTER.answer_turn(sse) == turn
    assert turn["content"] == "Fixing." and json.loads(turn["tool_calls"][0]["function"]["arguments"]) == \
        json.loads(ARGS)
