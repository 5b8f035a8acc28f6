"""The official openai client against the real engine server: shapes, token ids, logprobs, sampling."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from tests.engine.support import assert_teacher_forced

MESSAGES = [{"role": "user", "content": "Name three prime numbers."}]


def chat(client, **kwargs):
    extra = {"return_token_ids": True, **kwargs.pop("extra_body", {})}
    return client.chat.completions.create(model="tiny", messages=kwargs.pop("messages", MESSAGES),
                                          extra_body=extra, **kwargs)


def test_models_lists_the_served_name(client) -> None:
    assert [m.id for m in client.models.list().data] == ["tiny"]


def test_chat_token_ids_are_the_template_prompt_and_decode_to_the_text(client, tokenizer) -> None:
    response = chat(client, max_tokens=12, temperature=1.0, seed=3)
    expected_prompt = tokenizer.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=False)
    prompt_ids = response.model_extra["prompt_token_ids"]
    assert prompt_ids == tokenizer(expected_prompt, add_special_tokens=False)["input_ids"]
    choice = response.choices[0]
    token_ids = choice.model_extra["token_ids"]
    assert len(token_ids) == response.usage.completion_tokens == 12
    assert tokenizer.decode(token_ids, skip_special_tokens=True) == choice.message.content
    assert choice.finish_reason == "length"
    assert response.usage.prompt_tokens == len(prompt_ids)
    assert response.model_extra["policy_version"] == 0


def test_chat_logprobs_equal_teacher_forcing(client, reference_model, tokenizer) -> None:
    response = chat(client, max_tokens=10, temperature=1.3, top_p=0.9, seed=11, logprobs=True, top_logprobs=3)
    choice = response.choices[0]
    content = choice.logprobs.content
    token_ids = choice.model_extra["token_ids"]
    assert [e.token for e in content] == [tokenizer.decode([t]) for t in token_ids]
    assert all(len(e.top_logprobs) == 3 for e in content)
    assert all(e.top_logprobs[0].logprob >= e.logprob for e in content)
    assert all(e.bytes == list(e.token.encode()) for e in content)
    assert_teacher_forced(reference_model, response.model_extra["prompt_token_ids"], token_ids,
                          [e.logprob for e in content], temperature=1.3, top_p=0.9)  # the processed distribution


def test_list_content_is_flattened_for_the_chat_template(client, tokenizer) -> None:
    parts = [{"type": "text", "text": "Add "}, {"type": "text", "text": "1+2"}]
    response = chat(client, messages=[{"role": "user", "content": parts}], max_tokens=2, temperature=0)
    flat = [{"role": "user", "content": "Add \n1+2"}]  # text parts joined by newlines, as vLLM joins them
    rendered = tokenizer.apply_chat_template(flat, add_generation_prompt=True, tokenize=False)
    expected = tokenizer(rendered, add_special_tokens=False)["input_ids"]
    assert response.model_extra["prompt_token_ids"] == expected
    # tools with the tiny model's template (it has none): test_tool_calls_http.py


def test_completion_prompt_lists_give_n_choices_per_prompt(client) -> None:
    response = client.completions.create(model="tiny", prompt=[[5, 6], [7, 8, 9]], max_tokens=2, n=2, seed=0,
                                         extra_body={"return_token_ids": True})
    prompts = [c.model_extra["prompt_token_ids"] for c in response.choices]
    assert prompts == [[5, 6], [5, 6], [7, 8, 9], [7, 8, 9]]
    assert response.usage.prompt_tokens == 5 and response.usage.completion_tokens == 8


def test_concurrent_requests_of_different_lengths_are_each_exact(async_client, reference_model) -> None:
    async def one(i: int):
        messages = [{"role": "user", "content": "word " * (3 + 7 * i)}]
        return await async_client.chat.completions.create(
            model="tiny", messages=messages, max_tokens=4 + 3 * i, temperature=1.0, seed=i, logprobs=True,
            extra_body={"return_token_ids": True})

    async def all_of_them():
        return await asyncio.gather(*(one(i) for i in range(8)))

    for i, response in enumerate(asyncio.run(all_of_them())):
        choice = response.choices[0]
        assert len(choice.model_extra["token_ids"]) == 4 + 3 * i
        assert_teacher_forced(reference_model, response.model_extra["prompt_token_ids"],
                              choice.model_extra["token_ids"], [e.logprob for e in choice.logprobs.content])


def test_completions_with_token_id_prompt(client, reference_model, tokenizer) -> None:
    prompt = tokenizer("The quick brown fox")["input_ids"]
    response = client.completions.create(model="tiny", prompt=prompt, max_tokens=6, temperature=0, logprobs=2,
                                         extra_body={"return_token_ids": True})
    choice = response.choices[0]
    assert choice.model_extra["prompt_token_ids"] == prompt
    token_ids = choice.model_extra["token_ids"]
    assert tokenizer.decode(token_ids, skip_special_tokens=True) == choice.text
    logprobs = choice.logprobs
    assert logprobs.tokens == [tokenizer.decode([t]) for t in token_ids]
    assert logprobs.text_offset == [sum(len(t) for t in logprobs.tokens[:i]) for i in range(len(token_ids))]
    assert all(max(top.values()) == lp for top, lp in zip(logprobs.top_logprobs, logprobs.token_logprobs,
                                                          strict=True)), "greedy picks the best token"
    assert_teacher_forced(reference_model, prompt, token_ids, logprobs.token_logprobs)


def test_text_prompt_equals_its_token_ids(client, tokenizer) -> None:
    text = "Once upon a time"
    by_text = client.completions.create(model="tiny", prompt=text, max_tokens=5, temperature=0,
                                        extra_body={"return_token_ids": True})
    by_ids = client.completions.create(model="tiny", prompt=tokenizer(text)["input_ids"], max_tokens=5,
                                       temperature=0, extra_body={"return_token_ids": True})
    assert by_text.choices[0].model_extra["token_ids"] == by_ids.choices[0].model_extra["token_ids"]
    assert by_text.usage.total_tokens == by_text.usage.prompt_tokens + 5


def test_chat_streaming_matches_the_non_streamed_answer(client) -> None:
    plain = chat(client, max_tokens=8, temperature=0)
    stream = chat(client, max_tokens=8, temperature=0, stream=True, logprobs=True,
                  stream_options={"include_usage": True})
    chunks = list(stream)
    first = chunks[0]
    assert first.choices[0].delta.role == "assistant" and first.choices[0].delta.content == ""
    assert first.model_extra["prompt_token_ids"] == plain.model_extra["prompt_token_ids"]
    token_chunks = [c for c in chunks[1:] if c.choices]
    assert [c.choices[0].model_extra["token_ids"][0] for c in token_chunks] == \
        plain.choices[0].model_extra["token_ids"]
    assert "".join(c.choices[0].delta.content or "" for c in token_chunks) == plain.choices[0].message.content
    assert all(len(c.choices[0].logprobs.content) == 1 for c in token_chunks)
    assert token_chunks[-1].choices[0].finish_reason == "length"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 8
    assert all(c.model_extra["policy_version"] == 0 for c in chunks)


def test_completion_streaming_marks_each_choice_first_chunk(client) -> None:
    stream = client.completions.create(model="tiny", prompt=[5, 6, 7], max_tokens=3, n=2, temperature=1.0,
                                       seed=1, stream=True, extra_body={"return_token_ids": True})
    per_choice: dict[int, list] = {0: [], 1: []}
    for chunk in stream:
        per_choice[chunk.choices[0].index].append(chunk.choices[0])
    for choices in per_choice.values():
        assert choices[0].model_extra["prompt_token_ids"] == [5, 6, 7]
        assert all("prompt_token_ids" not in c.model_extra for c in choices[1:])
        assert sum(len(c.model_extra["token_ids"]) for c in choices) == 3


def test_n_choices_and_seeds_are_reproducible(client) -> None:
    def ids(seed: int) -> list[list[int]]:
        response = chat(client, max_tokens=6, temperature=1.0, n=3, seed=seed)
        assert [c.index for c in response.choices] == [0, 1, 2]
        return [c.model_extra["token_ids"] for c in response.choices]

    first = ids(42)
    assert ids(42) == first
    assert len({tuple(t) for t in first}) == 3, "choices of one request are independent draws"
    assert ids(43) != first


def test_stop_string_cuts_text_but_keeps_its_tokens(client, tokenizer) -> None:
    full = chat(client, max_tokens=16, temperature=0).choices[0]
    text, full_ids = full.message.content, full.model_extra["token_ids"]
    middle = len(text) // 2
    stop = text[middle:middle + 3]
    cut = chat(client, max_tokens=16, temperature=0, stop=[stop, "@@never@@"]).choices[0]
    assert cut.message.content == text[:text.find(stop)]
    assert cut.finish_reason == "stop" and cut.model_extra["stop_reason"] == stop
    cut_ids = cut.model_extra["token_ids"]
    assert cut_ids == full_ids[:len(cut_ids)]
    assert stop in tokenizer.decode(cut_ids, skip_special_tokens=True)


def test_stop_token_id_ends_the_choice(client) -> None:
    full = chat(client, max_tokens=10, temperature=0).choices[0].model_extra["token_ids"]
    cut = chat(client, max_tokens=10, temperature=0, extra_body={"stop_token_ids": [full[4]]}).choices[0]
    assert cut.model_extra["token_ids"] == full[:full.index(full[4]) + 1]
    assert cut.finish_reason == "stop" and cut.model_extra["stop_reason"] == full[4]


def test_policy_version_header_on_every_response(engine_url: str) -> None:
    body = {"model": "tiny", "prompt": "hi", "max_tokens": 2}
    answers = (httpx.post(f"{engine_url}/v1/completions", json=body), httpx.get(f"{engine_url}/health"))
    for response in answers:
        assert response.headers["x-policy-version"] == "0"
        assert response.json()["policy_version"] == 0


@pytest.mark.parametrize(("route", "body", "status", "param", "words"), [
    ("chat/completions", {"model": "tiny"}, 400, "messages", "Field required"),
    ("chat/completions", {"model": "tiny", "messages": MESSAGES, "temperature": -1}, 400, "temperature",
     "greater than or equal to 0"),
    ("chat/completions", {"model": "tiny", "messages": MESSAGES, "top_logprobs": 2}, 400, None, "logprobs"),
    ("chat/completions", {"model": "other", "messages": MESSAGES}, 404, "model", "`other` does not exist"),
    ("chat/completions", {"model": "tiny", "messages": MESSAGES, "max_tokens": 9000}, 400, "max_tokens",
     "maximum context length is 4096"),
    ("completions", {"model": "tiny", "prompt": [1] * 4096}, 400, "prompt", "has 4096 tokens"),
    ("completions", {"model": "tiny", "prompt": [10**7]}, 400, "prompt", "outside the vocabulary"),
    ("completions", {"model": "tiny", "prompt": "x", "stream_options": {"include_usage": True}}, 400, None,
     "stream=true"),
])
def test_bad_requests_get_openai_errors(engine_url: str, route: str, body: dict, status: int,
                                        param: str | None, words: str) -> None:
    response = httpx.post(f"{engine_url}/v1/{route}", json=body)
    assert response.status_code == status
    error = response.json()["error"]
    assert words in error["message"]
    assert error["param"] == param
    assert error["type"] in ("invalid_request_error", "NotFoundError")


def test_a_pre_tokenized_chat_prompt_is_the_prompt_as_vllm_takes_it(client, tokenizer) -> None:
    """vLLM's `kv_transfer_params.prompt_token_ids` (what the gateway's recorded turns send): the engine generates
    from those tokens, not from the rendered messages; ids outside the vocabulary are a 400 naming the field."""
    rendered = chat(client, max_tokens=4, temperature=0).model_extra["prompt_token_ids"]
    given = rendered + tokenizer("Two", add_special_tokens=False)["input_ids"]
    answer = chat(client, max_tokens=4, temperature=0, extra_body={"kv_transfer_params": {"prompt_token_ids": given}})
    assert answer.model_extra["prompt_token_ids"] == given and answer.usage.prompt_tokens == len(given)
    with pytest.raises(Exception) as refused:
        chat(client, max_tokens=4, extra_body={"kv_transfer_params": {"prompt_token_ids": [10**9]}})
    assert refused.value.status_code == 400 and "kv_transfer_params.prompt_token_ids" in str(refused.value)
