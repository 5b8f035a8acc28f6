"""The official openai client through the gateway in front of the real embedded engine (tiny model).

The recorded token IDs must be the engine's own, decode to the rendered prompt and the returned text, and a
multi-turn conversation must record prompts that extend the previous prompt + response wherever the tokenizer allows.
"""

from __future__ import annotations

import httpx
import openai
import pytest
from transformers import AutoTokenizer

from gateway.client import GatewayClient
from gateway.records import CallStatus, RolloutMode, RolloutSpec
from tests.gateway.support import ADMIN_TOKEN
from tests.inprocess import InProcessGateway

MESSAGES = [{"role": "user", "content": "Write one word about the sea."}]


@pytest.fixture(scope="module")
def engine_gateway(tmp_path_factory, engine_url):
    gw = InProcessGateway(tmp_path_factory.mktemp("gw-engine") / "store.db").start()
    with GatewayClient(gw.url, ADMIN_TOKEN) as admin:
        admin.register_model("tiny", engine_url + "/v1")
    yield gw
    gw.stop()


@pytest.fixture(scope="module")
def admin(engine_gateway):
    with GatewayClient(engine_gateway.url, ADMIN_TOKEN) as client:
        yield client


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    return AutoTokenizer.from_pretrained(tiny_model_dir)


def _rollout(admin: GatewayClient, rollout_id: str, mode: RolloutMode = RolloutMode.TRAIN) -> openai.OpenAI:
    created = admin.create_rollouts([RolloutSpec(id=rollout_id, group_id="g", mode=mode)])[0]
    return openai.OpenAI(base_url=created.base_url, api_key=created.api_key, max_retries=0)


def _direct(engine_url: str, path: str, body: dict) -> dict:
    response = httpx.post(f"{engine_url}/v1/{path}", json={**body, "return_token_ids": True}, timeout=60)
    response.raise_for_status()
    return response.json()


def test_chat_records_the_engines_own_tokens(admin, engine_url, tokenizer):
    client = _rollout(admin, "chat-unary")
    sampling = {"temperature": 1.0, "seed": 7, "max_tokens": 12}
    answer = client.chat.completions.create(model="tiny", messages=MESSAGES, **sampling)
    direct = _direct(engine_url, "chat/completions", {"model": "tiny", "messages": MESSAGES, **sampling})
    [call] = admin.calls("chat-unary")
    assert call.status == CallStatus.OK and call.kind == "chat" and not call.stream
    assert call.prompt_token_ids == direct["prompt_token_ids"]
    assert call.response_token_ids == direct["choices"][0]["token_ids"]
    assert call.response_token_ids == answer.choices[0].model_extra["token_ids"]
    rendered = tokenizer.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True)
    assert tokenizer.decode(call.prompt_token_ids) == rendered
    text = answer.choices[0].message.content
    assert tokenizer.decode(call.response_token_ids, skip_special_tokens=True) == text == call.response_text
    assert len(call.response_logprobs) == len(call.response_token_ids)
    assert all(lp <= 0 for lp in call.response_logprobs)
    assert call.policy_version == 0 and call.finish_reason == answer.choices[0].finish_reason


def test_completion_with_text_and_token_prompts(admin, engine_url, tokenizer):
    client = _rollout(admin, "completion-unary")
    text_answer = client.completions.create(model="tiny", prompt="The sea is", max_tokens=6, seed=3)
    ids = tokenizer.encode("The sea is")
    id_answer = client.completions.create(model="tiny", prompt=ids, max_tokens=6, seed=3)
    first, second = admin.calls("completion-unary")
    assert first.prompt_token_ids == ids == second.prompt_token_ids
    assert first.response_token_ids == second.response_token_ids  # same prompt IDs and seed, same sample
    assert tokenizer.decode(first.response_token_ids, skip_special_tokens=True) == text_answer.choices[0].text
    assert id_answer.choices[0].text == text_answer.choices[0].text
    assert len(first.response_logprobs) == len(first.response_token_ids)
    assert (first.seq, second.seq) == (0, 1)


@pytest.mark.parametrize("kind", ["chat", "completion"])
def test_streaming_is_passed_through_and_recorded_in_full(admin, engine_url, tokenizer, kind):
    client = _rollout(admin, f"stream-{kind}")
    sampling = {"temperature": 1.0, "seed": 11, "max_tokens": 10}
    if kind == "chat":
        chunks = list(client.chat.completions.create(model="tiny", messages=MESSAGES, stream=True, **sampling))
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        direct = _direct(engine_url, "chat/completions", {"model": "tiny", "messages": MESSAGES, **sampling})
        direct_prompt = direct["prompt_token_ids"]
    else:
        chunks = list(client.completions.create(model="tiny", prompt="Waves", stream=True, **sampling))
        text = "".join(c.choices[0].text for c in chunks if c.choices)
        direct = _direct(engine_url, "completions", {"model": "tiny", "prompt": "Waves", **sampling})
        direct_prompt = direct["choices"][0]["prompt_token_ids"]
    [call] = admin.calls(f"stream-{kind}")
    assert call.stream and call.status == CallStatus.OK
    assert call.prompt_token_ids == direct_prompt
    assert call.response_token_ids == direct["choices"][0]["token_ids"]
    assert call.response_text == text == tokenizer.decode(call.response_token_ids, skip_special_tokens=True)
    assert len(call.response_logprobs) == len(call.response_token_ids)
    assert call.response_raw.rstrip().endswith("data: [DONE]")
    streamed_ids = [i for c in chunks if c.choices for i in (c.choices[0].model_extra.get("token_ids") or [])]
    assert streamed_ids == call.response_token_ids


def test_val_mode_records_tokens_without_forcing_logprobs(admin):
    client = _rollout(admin, "val-rollout", RolloutMode.VAL)
    client.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=4, seed=1)
    [call] = admin.calls("val-rollout")
    assert call.prompt_token_ids and call.response_token_ids
    assert call.response_logprobs == []


def _round_trips(tokenizer, response_ids: list[int]) -> bool:
    """Would the engine re-tokenize this response's text into the same IDs (the tokenizer allows the prefix)?"""
    body = [t for t in response_ids if t != tokenizer.eos_token_id]
    return tokenizer.encode(tokenizer.decode(body), add_special_tokens=False) == body


def test_multi_turn_prompts_extend_the_previous_context_where_the_tokenizer_allows(admin, tokenizer):
    outcomes = []
    for seed in range(8):
        rollout_id = f"multi-turn-{seed}"
        client = _rollout(admin, rollout_id)
        first = client.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=1 + seed % 3, seed=seed)
        follow_up = [*MESSAGES, {"role": "assistant", "content": first.choices[0].message.content},
                     {"role": "user", "content": "And another?"}]
        client.chat.completions.create(model="tiny", messages=follow_up, max_tokens=2, seed=seed)
        call1, call2 = admin.calls(rollout_id)
        context = call1.prompt_token_ids + call1.response_token_ids
        token_prefix = call2.prompt_token_ids[: len(context)] == context
        decoded_prompt2 = tokenizer.decode(call2.prompt_token_ids)
        text_prefix = decoded_prompt2.startswith(tokenizer.decode(call1.prompt_token_ids)
                                                 + tokenizer.decode(call1.response_token_ids, skip_special_tokens=True))
        assert text_prefix, "the rendered conversation must extend the first call's text"
        assert token_prefix == _round_trips(tokenizer, call1.response_token_ids)
        outcomes.append(token_prefix)
    assert any(outcomes), "at least one short response must merge at the token level"


@pytest.mark.parametrize("stream", [False, True], ids=["unary", "stream"])
def test_every_choice_of_n_is_recorded_as_the_engine_sampled_it(admin, engine_url, stream):
    rollout_id = f"chat-n3-{'stream' if stream else 'unary'}"
    client = _rollout(admin, rollout_id)
    sampling = {"temperature": 1.0, "seed": 11, "max_tokens": 6, "n": 3}
    answer = client.chat.completions.create(model="tiny", messages=MESSAGES, stream=stream, **sampling)
    if stream:
        list(answer)
    direct = _direct(engine_url, "chat/completions", {"model": "tiny", "messages": MESSAGES, **sampling})
    [call] = admin.calls(rollout_id)
    assert call.n_choices == 3 and [c.index for c in call.extra_choices] == [1, 2]
    assert call.response_token_ids == direct["choices"][0]["token_ids"]
    for choice in call.extra_choices:
        expected = direct["choices"][choice.index]
        assert choice.response_token_ids == expected["token_ids"]
        assert choice.response_text == expected["message"]["content"]
        assert choice.finish_reason == expected["finish_reason"]
        assert len(choice.response_logprobs) == len(choice.response_token_ids)
        assert choice.prompt_token_ids == []  # the call's prompt
