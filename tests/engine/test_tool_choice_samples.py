"""The trainer's samples across an engine-forced tool call (slow tier): the forced opening is observation, what the
policy sampled is trained, and the next turn's prompt extends the forced call's prompt + response.

Both calls go through the real engine (`tiny`), and the gateway's own `capture_json` reads their answers as it
records them; `trainer.samples.build_samples` merges them (used as a library). The tiny model's random weights never
write valid arguments, so the forced call's sampled arguments are stood in by what a trained model writes after the
forced opening (`"arguments": {"a":` for an integer first argument, `"arguments": {"expression": "` for a string):
the tokens of the rest of the call (` 12, "b": 3}}\\n</tool_call>`, `12 * 3"}}\\n</tool_call>`) and the end of the
turn, with made-up logprobs. The tokens the engine itself chose under the name constraint (`required` with several
functions) are kept as it answered them, null logprobs included.
"""

from __future__ import annotations

import httpx
import numpy as np
import pytest

from engines.serving.forced_call import function_openings
from gateway.capture import Captured, capture_json
from tests.engine.test_tool_choice_http import MESSAGES, TOOLS
from trainer.samples import RecordedCall, build_samples

ARGUMENTS = '{"a": 12, "b": 3}'
CALCULATOR = {"type": "function", "function": {"name": "calculator", "parameters": {
    "type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]}}}
FORCED, CONSTRAINED = "tool_choice_forced_tokens", "tool_choice_constrained_tokens"
SAMPLED_LOGPROB = -0.25


def chat(engine_url: str, messages: list[dict], tool_choice, tools=TOOLS) -> tuple[dict, Captured]:
    """(the engine's answer, what the gateway captures of it)."""
    body = {"model": "tiny", "messages": messages, "tools": tools, "tool_choice": tool_choice, "max_tokens": 16,
            "return_token_ids": True, "logprobs": True, "temperature": 1.0, "seed": 3}
    answer = httpx.post(f"{engine_url}/v1/chat/completions", json=body, timeout=120).json()
    captured = capture_json(answer)
    assert not captured.broken, captured.error
    return answer, captured


def call(seq: int, prompt: list[int], response: list[int], logprobs: list[float]) -> RecordedCall:
    return RecordedCall("r1", "g1", seq, tuple(prompt), tuple(response), tuple(logprobs), 0, True, "stop")


def next_turn(name: str, arguments: str = ARGUMENTS) -> list[dict]:
    """The harness's next call: the forced call as the answer's message, then its result."""
    return [*MESSAGES,
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": name, "arguments": arguments}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "36"}]


def arguments_tokens(tokenizer, name: str, arguments: str = ARGUMENTS, tools=TOOLS) -> list[int]:
    """What a trained model samples after the forced opening, up to and with its end of turn."""
    whole = '<tool_call>\n{"name": "' + name + '", "arguments": ' + arguments + "}\n</tool_call>"
    opening = function_openings(tools, (name,))[0]
    assert whole.startswith(opening)
    return (tokenizer(whole[len(opening):], add_special_tokens=False)["input_ids"]
            + [tokenizer.convert_tokens_to_ids("<|im_end|>")])


def merged_sample(first: RecordedCall, second: Captured):
    built = build_samples([first, call(1, second.prompt_token_ids, second.response_token_ids,
                                       second.response_logprobs)])
    assert built.stats.calls_merged == 1 and built.stats.merge_failures_template == 0
    assert built.stats.merge_failures_retokenization == built.stats.merge_failures_other == 0
    [sample] = built.samples
    assert sample.token_ids_T.tolist() == second.prompt_token_ids + second.response_token_ids
    return sample, built.stats


@pytest.mark.parametrize(("tools", "name", "arguments", "opening"), [
    (TOOLS, "multiply", ARGUMENTS, '<tool_call>\n{"name": "multiply", "arguments": {"a":'),
    ([CALCULATOR], "calculator", '{"expression": "12 * 3"}', '<tool_call>\n{"name": "calculator", "arguments": '
                                                              '{"expression": "'),
])
def test_a_named_call_merges_with_its_forced_opening_as_observation(engine_url, tokenizer, tools, name, arguments,
                                                                      opening) -> None:
    answer, forced_call = chat(engine_url, MESSAGES, {"type": "function", "function": {"name": name}}, tools)
    prompt, forced = forced_call.prompt_token_ids, answer[FORCED]
    sampled = arguments_tokens(tokenizer, name, arguments, tools)
    sample, _ = merged_sample(call(0, prompt, sampled, [SAMPLED_LOGPROB] * len(sampled)),
                              chat(engine_url, next_turn(name, arguments), "auto", tools)[1])
    mask = sample.loss_mask_T
    assert not mask[:len(prompt)].any() and mask[len(prompt):len(prompt) + len(sampled)].all()
    assert tokenizer.decode(sample.token_ids_T[len(prompt) - forced:len(prompt)].tolist()) == opening
    assert np.allclose(sample.logprobs_T[len(prompt):len(prompt) + len(sampled)], SAMPLED_LOGPROB)
    assert (sample.logprobs_T[:len(prompt)] == 0).all()


def test_required_merges_with_the_constrained_name_masked_and_the_arguments_trained(engine_url, tokenizer) -> None:
    answer, forced_call = chat(engine_url, MESSAGES, "required")
    answer_name = answer["choices"][0]["message"]["tool_calls"][0]["function"]["name"]
    constrained = answer["choices"][0][CONSTRAINED]
    name_tokens = forced_call.response_token_ids[:constrained]
    assert tokenizer.decode(name_tokens) == answer_name + '", "arguments": {"a":'
    prompt, sampled = forced_call.prompt_token_ids, arguments_tokens(tokenizer, answer_name)
    response = name_tokens + sampled
    logprobs = forced_call.response_logprobs[:constrained] + [SAMPLED_LOGPROB] * len(sampled)
    sample, stats = merged_sample(call(0, prompt, response, logprobs),
                                  chat(engine_url, next_turn(answer_name), "auto")[1])
    mask = sample.loss_mask_T
    start = len(prompt)
    assert not mask[:start + constrained].any() and mask[start + constrained:start + len(response)].all()
    assert stats.logprobs_missing == constrained
