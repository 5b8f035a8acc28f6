"""Merging through the real SmolLM2 tokenizer and chat template: canonical tokens merge, others retokenize."""

from __future__ import annotations

import pytest

from trainer.samples import RecordedCall, build_samples

pytestmark = pytest.mark.slow

USER = [{"role": "user", "content": "Say hello"}]
HISTORY = [*USER, {"role": "assistant", "content": "hello world"}, {"role": "user", "content": "again"}]


@pytest.fixture(scope="module")
def tokenizer():
    transformers = pytest.importorskip("transformers")
    from engines.model_cache import prepare_model

    return transformers.AutoTokenizer.from_pretrained(prepare_model("smollm2-135m-instruct"))


def render(tokenizer, messages) -> tuple[int, ...]:
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    return tuple(ids["input_ids"] if hasattr(ids, "keys") else ids)


def two_calls(tokenizer, response_text_pieces: list[str]) -> list[RecordedCall]:
    """The engine sampled `response_text_pieces` token by piece; the harness re-renders the history."""
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    response = tuple(
        t for piece in response_text_pieces for t in tokenizer.encode(piece, add_special_tokens=False)
    )
    response += (end,)
    first = RecordedCall(
        "r", "g", 0, render(tokenizer, USER), response, (-0.1,) * len(response), 0, True, "stop"
    )
    second = RecordedCall("r", "g", 1, render(tokenizer, HISTORY), (905, end), (-0.2, -0.3), 0, True, "stop")
    return [first, second]


def test_canonical_tokens_merge_into_one_sample(tokenizer):
    batch = build_samples(two_calls(tokenizer, ["hello world"]), decode=tokenizer.decode)
    assert batch.stats.samples == 1 and batch.stats.merge_failures == 0


def test_non_canonical_tokens_give_two_samples_classified_as_retokenization(tokenizer):
    batch = build_samples(two_calls(tokenizer, ["hel", "lo world"]), decode=tokenizer.decode)
    assert batch.stats.samples == 2
    assert batch.stats.merge_failures_retokenization == 1 and batch.stats.merge_failures == 1


def test_the_recorded_gateway_fixture_gives_two_samples_classified_as_retokenization(tokenizer):
    """The real case recorded through the gateway (tests/fixtures/retokenization_smollm2.json)."""
    import json
    from pathlib import Path

    fixture = json.loads((Path(__file__).parents[1] / "fixtures" / "retokenization_smollm2.json").read_text())
    calls = [RecordedCall("fixture", "g", c["seq"], tuple(c["prompt_token_ids"]), tuple(c["response_token_ids"]),
                          tuple(c["response_logprobs"]), c["policy_version"], True, c["finish_reason"])
             for c in fixture["calls"]]
    batch = build_samples(calls, decode=tokenizer.decode)
    assert batch.stats.samples == 2
    assert batch.stats.merge_failures_retokenization == 1 and batch.stats.merge_failures == 1


COMPACT_ABOVE = 5
"""The harness's compaction budget in these episodes (reply tokens since the last compaction): with these replies
(4 or 5 tokens), a compaction after every second part."""


def multistep_calls(tokenizer, parts: int, split_reply: int | None = None) -> list[RecordedCall]:
    """One multistep episode (recipes/multistep) rendered with SmolLM2's template: the engine's replies are the
    canonical tokens of a short sentence, except reply `split_reply`, sampled in two non-canonical pieces."""
    from recipes.multistep.conversation import next_messages, reply_tokens_after
    from recipes.multistep.tasks import generate

    task = {**next(t for t in generate(40, 0) if len(t["steps"]) == parts), "compact_above_tokens": COMPACT_ABOVE}
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    calls, messages, replies, reply_tokens = [], [], [], 0
    for index in range(parts):
        messages = next_messages(task, messages, replies, reply_tokens)
        pieces = ["hel", "lo world."] if index == split_reply else ["hello world."]
        response = tuple(t for piece in pieces for t in tokenizer.encode(piece, add_special_tokens=False)) + (end,)
        calls.append(RecordedCall("r", "g", index, render(tokenizer, messages), response, (-0.1,) * len(response), 0,
                                  True, "stop"))
        replies.append("".join(pieces))
        reply_tokens = reply_tokens_after(task, reply_tokens, len(response))
    return calls


@pytest.mark.parametrize(("parts", "split_reply", "samples", "other", "retokenization"), [
    (2, None, 1, 0, 0),
    (3, None, 2, 1, 0),  # the compaction before part 3 opens the second sample, counted as "other"
    (4, None, 2, 1, 0),
    (5, None, 3, 2, 0),
    (6, None, 3, 2, 0),
    (4, 0, 3, 1, 1),  # part 2 cannot extend part 1's non-canonical tokens: one retokenization failure more
    (4, 1, 2, 1, 0),  # the reply before a compaction is never extended: its tokens do not matter
])
def test_multistep_compactions_are_the_other_class_and_only_retokenization_adds_samples(
        tokenizer, parts, split_reply, samples, other, retokenization):
    """samples/merge_failures counts every sample after a rollout's first: for the multistep recipe its "other" class
    is the compactions (each opens a sample when every merge within a context succeeds)."""
    stats = build_samples(multistep_calls(tokenizer, parts, split_reply), decode=tokenizer.decode).stats
    assert (stats.samples, stats.merge_failures_other, stats.merge_failures_retokenization) == (
        samples, other, retokenization)
    assert stats.merge_failures_template == 0 and stats.merge_failures == samples - 1
