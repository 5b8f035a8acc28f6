"""Capture of token IDs, logprobs, text and finish reason from engine answers in vLLM's shapes."""

from __future__ import annotations

import math

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway import capture as capture_module
from gateway.capture import (
    ProtocolError,
    capture_bytes,
    capture_json,
    capture_sse,
    logprob_values,
    parse_version_header,
    token_ids_packed,
)
from gateway.tokens import pack_ids


def chat_body(index: int = 0, ids: list[int] | None = None, text: str = "hi") -> dict:
    ids = ids if ids is not None else [7, 8]
    return {"index": index, "message": {"role": "assistant", "content": text}, "token_ids": ids,
            "logprobs": {"content": [{"token": "x", "logprob": -0.5 * (i + 1)} for i in range(len(ids))]},
            "finish_reason": "stop"}


def sse(*chunks: dict) -> bytes:
    return b"".join(b"data: " + orjson.dumps(c) + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"


def test_chat_answer() -> None:
    cap = capture_json({"id": "chatcmpl-1", "prompt_token_ids": [1, 2, 3], "policy_version": 4,
                        "choices": [chat_body()]})
    assert (cap.prompt_token_ids, cap.response_token_ids, cap.response_logprobs) == ([1, 2, 3], [7, 8], [-0.5, -1.0])
    assert (cap.response_text, cap.finish_reason, cap.n_choices) == ("hi", "stop", 1)
    assert (cap.response_id, cap.policy_version, cap.error) == ("chatcmpl-1", 4, None)


def test_completion_answer_with_prompt_ids_on_the_choice() -> None:
    cap = capture_json({"id": "cmpl-1", "choices": [{
        "index": 0, "text": "ab", "prompt_token_ids": [1, 2], "token_ids": [9, 10],
        "logprobs": {"tokens": ["a", "b"], "token_logprobs": [-0.1, None]}, "finish_reason": "length"}]})
    assert (cap.prompt_token_ids, cap.response_token_ids) == ([1, 2], [9, 10])
    assert cap.response_logprobs[0] == -0.1 and math.isnan(cap.response_logprobs[1])
    assert (cap.response_text, cap.finish_reason) == ("ab", "length")


def test_answer_without_logprobs_or_ids_captures_text_only() -> None:
    cap = capture_json({"choices": [{"index": 0, "message": {"content": "plain"}, "finish_reason": "stop"}]})
    assert (cap.prompt_token_ids, cap.response_token_ids, cap.response_logprobs) == ([], [], [])
    assert (cap.response_text, cap.policy_version) == ("plain", None)


@pytest.mark.parametrize("order", [(0, 1, 2), (2, 0, 1)])
def test_n_choices_keeps_the_first_in_the_call_and_every_other_by_index(order: tuple[int, ...]) -> None:
    choices = [chat_body(i, ids=[100 * (i + 1), 7], text=f"c{i}") for i in order]
    choices[0]["finish_reason"] = "length"  # whichever choice comes first in the list
    cap = capture_json({"prompt_token_ids": [1], "choices": choices})
    assert (cap.n_choices, cap.response_token_ids, cap.response_text) == (3, [100, 7], "c0")
    assert [c.index for c in cap.other_choices()] == [1, 2]
    for choice in cap.other_choices():
        i = choice.index
        assert (choice.response_token_ids, choice.response_logprobs) == ([100 * (i + 1), 7], [-0.5, -1.0])
        assert choice.response_text == f"c{i}"
        assert choice.finish_reason == ("length" if order[0] == i else "stop")
        assert choice.prompt_token_ids == []  # chat: the call's prompt


def test_completions_with_two_prompts_keep_each_choices_prompt() -> None:
    cap = capture_json({"choices": [
        {"index": 0, "text": "a", "prompt_token_ids": [1, 2], "token_ids": [9],
         "logprobs": {"token_logprobs": [-0.1]}, "finish_reason": "stop"},
        {"index": 1, "text": "b", "prompt_token_ids": [3], "token_ids": [8],
         "logprobs": {"token_logprobs": [None]}, "finish_reason": "length"}]})
    (second,) = cap.other_choices()
    assert (cap.prompt_token_ids, second.prompt_token_ids, second.response_token_ids) == ([1, 2], [3], [8])
    assert math.isnan(second.response_logprobs[0]) and second.finish_reason == "length"


def test_a_broken_second_choice_breaks_the_answer() -> None:
    cap = capture_json({"choices": [chat_body(0), {"index": 1, "token_ids": [-1]}]})
    assert cap.broken and "choices[1].token_ids" in cap.error


@pytest.mark.parametrize(("body", "message"), [
    ({"error": {"message": "boom", "type": "server_error"}}, "boom"),
    ({"error": "plain failure"}, "plain failure"),
    ({"error": {"type": "no_message"}}, "{'type': 'no_message'}"),
])
def test_error_bodies(body: dict, message: str) -> None:
    assert capture_json(body).error == message


def test_chat_stream_with_prompt_ids_once_and_ids_per_chunk() -> None:
    stream = sse(
        {"id": "c-1", "prompt_token_ids": [1, 2], "policy_version": 2,
         "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]},
        {"id": "c-1", "choices": [{"index": 0, "delta": {"content": "he"}, "token_ids": [5],
                                   "logprobs": {"content": [{"token": "he", "logprob": -0.25}]}}]},
        {"id": "c-1", "choices": [{"index": 0, "delta": {"content": "y"}, "token_ids": [6],
                                   "logprobs": {"content": [{"token": "y", "logprob": -0.75}]},
                                   "finish_reason": "stop"}]},
        {"id": "c-1", "choices": [], "usage": {"prompt_tokens": 2, "completion_tokens": 2}},
    )
    cap = capture_sse(stream)
    assert (cap.prompt_token_ids, cap.response_token_ids, cap.response_logprobs) == ([1, 2], [5, 6], [-0.25, -0.75])
    assert (cap.response_text, cap.finish_reason, cap.response_id, cap.policy_version) == ("hey", "stop", "c-1", 2)
    assert cap.error is None


def test_stream_with_two_choices_interleaved() -> None:
    stream = sse(*[{"choices": [{"index": i % 2, "delta": {"content": f"{i}"}, "token_ids": [i],
                                 "logprobs": {"content": [{"logprob": -float(i)}]},
                                 "finish_reason": ("stop" if i == 4 else "length") if i >= 4 else None}]}
                   for i in range(6)])
    cap = capture_sse(stream)
    assert (cap.n_choices, cap.response_token_ids, cap.response_text, cap.finish_reason) == (2, [0, 2, 4], "024",
                                                                                             "stop")
    (second,) = cap.other_choices()
    assert (second.index, second.response_token_ids, second.response_text) == (1, [1, 3, 5], "135")
    assert (second.response_logprobs, second.finish_reason) == ([-1.0, -3.0, -5.0], "length")


def test_a_stream_chunk_may_carry_several_choices() -> None:
    cap = capture_sse(sse({"choices": [{"index": 1, "token_ids": [4]}, {"index": 0, "token_ids": [3]}]},
                          {"choices": [{"index": 0, "token_ids": [5]}, {"index": 1, "token_ids": [6]}]}))
    assert (cap.response_token_ids, cap.other_choices()[0].response_token_ids) == ([3, 5], [4, 6])


def test_stream_error_event_and_undecodable_chunk() -> None:
    assert capture_sse(sse({"error": {"message": "engine died"}})).error == "engine died"
    assert "undecodable" in capture_sse(b"data: {not json\n\n").error


def test_stream_ignores_comments_and_blank_data() -> None:
    cap = capture_sse(b": keep-alive\n\ndata:\n\n" + sse({"choices": [{"index": 0, "token_ids": [3]}]}))
    assert (cap.response_token_ids, cap.error) == ([3], None)


@given(ids=st.lists(st.integers(0, 2**31 - 1), min_size=1, max_size=40), cut=st.integers(1, 8))
def test_stream_reassembles_ids_however_they_are_chunked(ids: list[int], cut: int) -> None:
    chunks = [{"choices": [{"index": 0, "token_ids": ids[i:i + cut],
                            "logprobs": {"content": [{"logprob": -float(t % 7)} for t in ids[i:i + cut]]}}]}
              for i in range(0, len(ids), cut)]
    cap = capture_sse(sse(*chunks))
    assert cap.response_token_ids == ids
    assert cap.response_logprobs == [-float(t % 7) for t in ids]


def _token_id_reference(value: object) -> bool:
    """The per-element definition the bulk check must agree with: integers (not booleans) in [0, 2^31)."""
    return isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**31
                                           for v in value)


ITEMS = st.one_of(st.integers(-2**40, 2**40), st.sampled_from([0, 1, 2**31 - 1, 2**31, -1, -2**31, 2**32 - 1, 2**63]),
                  st.booleans(), st.floats(allow_nan=False), st.none(), st.text(max_size=3))


@given(values=st.lists(ITEMS, max_size=12), base=st.lists(st.integers(0, 2**31 - 1), max_size=600))
def test_token_ids_are_checked_in_bulk_as_element_by_element(values: list, base: list[int]) -> None:
    for candidate in (values, base, base + values, values + base):
        packed = token_ids_packed(candidate)
        assert (packed is not None) == _token_id_reference(candidate)
        if packed is not None:
            assert packed == pack_ids(candidate)
    assert token_ids_packed(tuple(base)) is None and token_ids_packed({"ids": base}) is None


@given(values=st.lists(st.one_of(st.floats(allow_nan=False), st.integers(-10**6, 0), st.none(), st.booleans(),
                                 st.text(max_size=2)), max_size=20))
def test_logprobs_are_numbers_or_null_checked_in_bulk(values: list) -> None:
    valid = all(v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)) for v in values)
    if not valid:
        with pytest.raises(ProtocolError, match="a logprob must be a number or null"):
            logprob_values(values)
        return
    got = logprob_values(values)
    assert len(got) == len(values)
    assert all(math.isnan(g) if v is None else g == float(v) and type(g) is float
               for v, g in zip(values, got, strict=True))


def test_the_prompt_ids_are_packed_once_as_they_are_checked() -> None:
    cap = capture_json({"prompt_token_ids": [1, 2, 3], "choices": [chat_body()]})
    assert cap.prompt_ids_packed == pack_ids([1, 2, 3])
    completion = capture_json({"choices": [{"index": 0, "prompt_token_ids": [4, 5], "text": "a"},
                                           {"index": 1, "prompt_token_ids": [6], "text": "b"}]})
    assert completion.prompt_ids_packed == pack_ids([4, 5]) and completion.prompt_token_ids == [4, 5]
    for bad in ([1, True], [1, -1], [1, 2**31], [1, 2.0], [1, None]):
        assert capture_json({"prompt_token_ids": bad, "choices": [chat_body()]}).broken


@pytest.mark.parametrize("version", [2**31, 2**63, "9223372036854775808", "99999999999999999999", -1, "1e3", True])
def test_a_policy_version_past_the_stores_column_is_a_protocol_error_not_a_500(version):
    """An engine's x-policy-version of 2**63 was a 500 on SQLite with nothing recorded (fuzz review): now off the
    protocol, a recorded upstream error."""
    with pytest.raises(ProtocolError, match="policy_version must be an integer from 0 to"):
        parse_version_header(str(version)) if isinstance(version, str) else capture_module._version(version)
    assert parse_version_header(str(2**31 - 1)) == 2**31 - 1 and parse_version_header(" 7 ") == 7


def test_the_engines_forced_opening_is_captured_unary_and_streamed_and_absent_when_not_reported() -> None:
    """The embedded engine says how many prompt tokens a forced tool call's opening took (top level; on a stream's
    first chunks); the trainer trains such a call and masks one an engine forced with a grammar over the response."""
    unary = capture_json({"id": "c", "prompt_token_ids": [1, 2], "tool_choice_forced_tokens": 20,
                          "choices": [chat_body()]})
    assert unary.forced_prompt_tokens == 20 and not unary.broken
    streamed = capture_sse(sse(
        {"id": "c", "prompt_token_ids": [1, 2], "tool_choice_forced_tokens": 7,
         "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]},
        {"id": "c", "choices": [{"index": 0, "delta": {"content": "x"}, "token_ids": [5],
                                 "logprobs": {"content": [{"token": "x", "logprob": -0.5}]}, "finish_reason": "stop"}]},
    ))
    assert streamed.forced_prompt_tokens == 7 and not streamed.broken
    assert capture_json({"id": "c", "choices": [chat_body()]}).forced_prompt_tokens is None


@pytest.mark.parametrize("value", [-1, 1.5, "20", True, 1 << 40])
def test_a_forced_token_count_that_is_not_one_breaks_the_answer(value) -> None:
    cap = capture_json({"id": "c", "tool_choice_forced_tokens": value, "choices": [chat_body()]})
    assert cap.broken and "tool_choice_forced_tokens" in cap.error


@pytest.mark.parametrize("item", [1, "x", None, [0.5]])
def test_a_logprob_entry_that_is_not_an_object_breaks_the_answer(item) -> None:
    cap = capture_json({"choices": [{"index": 0, "token_ids": [5, 6],
                                     "logprobs": {"content": [{"logprob": -0.5}, item]}}]})
    assert cap.broken and "logprobs.content must be a list of objects" in cap.error


def test_capture_bytes_breaks_on_a_body_that_is_not_json_and_captures_one_that_is() -> None:
    assert capture_bytes(b"{not json").broken
    cap = capture_bytes(b'{"prompt_token_ids": [1, 2], "choices": [{"index": 0, "token_ids": [3]}]}')
    assert not cap.broken and (cap.prompt_token_ids, cap.response_token_ids) == ([1, 2], [3])
