"""`tool_choice` through the real engine server with the `tiny` model (slow tier): its random weights never write a
call on their own, so every call below exists because the engine enforced the choice.

Checked per mode, unary and streamed: the answer's calls, where the forced opening went (the end of
`prompt_token_ids`, as the gateway captures it), that token ids and logprobs are only what was sampled (the logprobs
equal teacher forcing after the forced prompt), and the 400s for choices the request cannot have.
"""

from __future__ import annotations

import httpx
import pytest

from engines.serving.chat_template import render_chat
from engines.serving.forced_call import function_openings
from gateway.capture import capture_json, capture_sse
from tests.engine.support import assert_teacher_forced


def tool(name: str) -> dict:
    return {"type": "function", "function": {"name": name, "description": f"{name} two integers",
                                             "parameters": {"type": "object",
                                                            "properties": {"a": {"type": "integer"},
                                                                           "b": {"type": "integer"}},
                                                            "required": ["a", "b"]}}}


TOOLS = [tool("add"), tool("add_two"), tool("multiply")]
NAMES = ("add", "add_two", "multiply")
NAMED = {"type": "function", "function": {"name": "multiply"}}
MESSAGES = [{"role": "system", "content": "Use the tools."}, {"role": "user", "content": "What is 12 * 3?"}]


def post(engine_url: str, **fields) -> httpx.Response:
    body = {"model": "tiny", "messages": MESSAGES, "tools": TOOLS, "return_token_ids": True, "logprobs": True,
            "temperature": 1.0, "seed": 11, **fields}
    return httpx.post(f"{engine_url}/v1/chat/completions", json=body, timeout=120)


def encode(tokenizer, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def conversation(tokenizer, tools=TOOLS) -> str:
    return render_chat(tokenizer, MESSAGES, tools).text


def opening(name: str) -> str:
    """`<tool_call>\\n{"name": "<name>", "arguments": {"a":`: the first argument is declared and required."""
    return function_openings(TOOLS, (name,))[0]


def test_a_named_function_is_called_and_its_opening_is_prompt_not_response(engine_url, tokenizer,
                                                                             reference_model) -> None:
    body = post(engine_url, tool_choice=NAMED, n=6, max_tokens=6).json()
    prompt_ids = body["prompt_token_ids"]
    own = encode(tokenizer, conversation(tokenizer))
    assert opening("multiply") == '<tool_call>\n{"name": "multiply", "arguments": {"a":'
    assert prompt_ids == encode(tokenizer, conversation(tokenizer) + opening("multiply"))
    assert prompt_ids[:len(own)] == own and body["tool_choice_forced_tokens"] == len(prompt_ids) - len(own) > 5
    assert body["usage"]["prompt_tokens"] == len(prompt_ids)
    for choice in body["choices"]:
        [call] = choice["message"]["tool_calls"]
        assert call["function"]["name"] == "multiply" and choice["finish_reason"] in ("stop", "length")
        token_ids = choice["token_ids"]
        logprobs = [entry["logprob"] for entry in choice["logprobs"]["content"]]
        assert choice["tool_choice_constrained_tokens"] == 0 and not tokenizer.decode(token_ids).startswith("<")
        assert_teacher_forced(reference_model, prompt_ids, token_ids, logprobs)
    assert body["usage"]["completion_tokens"] == sum(len(c["token_ids"]) for c in body["choices"])


def test_required_calls_a_declared_function_whose_constrained_name_has_no_logprob(engine_url, tokenizer,
                                                                                   reference_model) -> None:
    body = post(engine_url, tool_choice="required", n=8, max_tokens=16).json()
    prompt_ids = body["prompt_token_ids"]
    assert tokenizer.decode(prompt_ids).endswith('<|im_start|>assistant\n<tool_call>\n{"name": "')
    assert prompt_ids == encode(tokenizer, conversation(tokenizer) + '<tool_call>\n{"name": "')
    for choice in body["choices"]:
        [call, *_] = choice["message"]["tool_calls"]
        constrained = choice["tool_choice_constrained_tokens"]
        token_ids = choice["token_ids"]
        logprobs = [entry["logprob"] for entry in choice["logprobs"]["content"]]
        assert call["function"]["name"] in NAMES and choice["finish_reason"] in ("tool_calls", "length")
        assert tokenizer.decode(token_ids[:constrained]) == call["function"]["name"] + '", "arguments": {"a":'
        assert logprobs[:constrained] == [None] * constrained and None not in logprobs[constrained:]
        assert_teacher_forced(reference_model, prompt_ids + token_ids[:constrained], token_ids[constrained:],
                              logprobs[constrained:])


def test_required_with_one_function_forces_it_whole(engine_url, tokenizer) -> None:
    body = post(engine_url, tools=[tool("add")], tool_choice="required", max_tokens=3).json()
    [choice] = body["choices"]
    assert body["prompt_token_ids"] == encode(tokenizer, conversation(tokenizer, [tool("add")]) + opening("add"))
    assert choice["message"]["tool_calls"][0]["function"]["name"] == "add"
    assert choice["tool_choice_constrained_tokens"] == 0 and None not in [
        e["logprob"] for e in choice["logprobs"]["content"]]


@pytest.mark.parametrize("tool_choice", [NAMED, "required"])
def test_a_streamed_forced_answer_is_the_unary_one_and_the_gateway_captures_it_the_same(engine_url,
                                                                                         tool_choice) -> None:
    unary = post(engine_url, tool_choice=tool_choice, max_tokens=8).json()
    stream = post(engine_url, tool_choice=tool_choice, max_tokens=8, stream=True).content
    streamed, whole = capture_sse(stream), capture_json(unary)
    assert not streamed.broken and streamed.prompt_token_ids == whole.prompt_token_ids == unary["prompt_token_ids"]
    assert streamed.response_token_ids == whole.response_token_ids == unary["choices"][0]["token_ids"]
    assert len(streamed.response_logprobs) == len(streamed.response_token_ids)
    assert streamed.forced_prompt_tokens == whole.forced_prompt_tokens == unary["tool_choice_forced_tokens"] > 0
    chunks = [line for line in stream.split(b"\n") if line.startswith(b"data: {")]
    assert b'"tool_choice_forced_tokens":' in chunks[0]
    assert b'"tool_calls":[{"index":0' in stream and b'"tool_choice_constrained_tokens":' in chunks[-1]


def test_the_sdk_streams_a_forced_call(client) -> None:
    stream = client.chat.completions.create(model="tiny", messages=MESSAGES, tools=TOOLS, tool_choice="required",
                                            max_tokens=12, stream=True, seed=5)
    calls = [call for chunk in stream for choice in chunk.choices for call in choice.delta.tool_calls or ()]
    assert len(calls) >= 1 and calls[0].function.name in NAMES and calls[0].index == 0


def test_auto_and_none_force_nothing(engine_url, tokenizer) -> None:
    own = encode(tokenizer, conversation(tokenizer))
    for tool_choice in ("auto", "none"):
        body = post(engine_url, tool_choice=tool_choice, max_tokens=3).json()
        assert body["prompt_token_ids"] == own and "tool_choice_forced_tokens" not in body
        assert body["choices"][0]["message"]["tool_calls"] == []
        assert "tool_choice_constrained_tokens" not in body["choices"][0]
    stream = post(engine_url, tool_choice="none", max_tokens=3, stream=True).content
    assert b"tool_choice_forced_tokens" not in stream and b'"tool_calls":[{' not in stream


@pytest.mark.parametrize(("fields", "param", "words"), [
    ({"tool_choice": "required", "tools": None}, "tool_choice", "needs at least one function"),
    ({"tool_choice": {"type": "function", "function": {"name": "divide"}}}, "tool_choice",
     "'divide', which is not among the request's tools ['add', 'add_two', 'multiply']"),
    ({"tool_choice": {"type": "function", "function": {}}}, "tool_choice.function.name", "non-empty string"),
    ({"tool_choice": "sometimes"}, "tool_choice", "'sometimes' is not supported"),
    ({"tool_choice": "required", "continue_final_message": True, "add_generation_prompt": False,
      "messages": [*MESSAGES, {"role": "assistant", "content": "Let"}]}, "tool_choice",
     "needs add_generation_prompt=true and continue_final_message=false"),
])
def test_invalid_tool_choices_are_400s_naming_the_problem(engine_url, fields, param, words) -> None:
    response = post(engine_url, max_tokens=2, **fields)
    error = response.json()["error"]
    assert response.status_code == 400 and words in error["message"] and error["param"] == param
