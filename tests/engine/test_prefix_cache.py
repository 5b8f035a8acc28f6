"""Prefix caching: the LRU itself, a prefill after a cached prefix equals a full prefill, and a scheduler that reuses
a finished row's KV still reports exact logprobs, clears on weight operations and counts what it reused."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from engines.serving import kv_batch
from engines.serving.model_holder import ModelHolder
from engines.serving.prefix_cache import PrefixCache, common_prefix_len
from engines.serving.sampling import RowSampling
from engines.serving.scheduler import GenerationScheduler, TokenEvent
from engines.serving.weights_api import prefix_cache_body
from tests.engine.support import assert_teacher_forced
from tests.engine.test_scheduler import submit, wait_for_tokens

GREEDY = RowSampling(temperature=0.0, top_p=1.0, top_k=-1)


def fake_layers(length: int, layers: int = 2) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """KV of one row whose value at position i is i (so a cut is visible)."""
    ramp = torch.arange(length, dtype=torch.float32).reshape(1, 1, length, 1)
    return [(ramp.clone(), -ramp.clone()) for _ in range(layers)]


@pytest.mark.parametrize(("a", "b", "shared"), [
    ([], [1], 0), ([1, 2, 3], [1, 2, 3], 3), ([1, 2, 3], [1, 2], 2), ([1, 2, 3], [1, 9, 3], 1), ([5], [6], 0)])
def test_common_prefix_len(a, b, shared) -> None:
    assert common_prefix_len(a, b) == shared


def test_the_longest_shared_prefix_is_reused_and_cut_exactly() -> None:
    cache = PrefixCache(max_tokens=100, min_reuse_tokens=2)
    cache.store([1, 2, 3, 4], fake_layers(4))
    cache.store([1, 2, 3, 4, 5, 6, 7], fake_layers(7))
    hit = cache.lookup([1, 2, 3, 4, 5, 9, 9])
    assert hit is not None and hit.length == 5
    assert hit.layers[0][0].flatten().tolist() == [0, 1, 2, 3, 4]
    assert hit.layers[1][1].flatten().tolist() == [0, -1, -2, -3, -4]
    assert cache.stats.hit_tokens == 5 and cache.stats.queried_tokens == 7


@pytest.mark.parametrize(("prompt", "reused"), [
    ([1, 2, 3, 4], 3),  # the whole prompt is cached: its last token still runs (its logits start the answer)
    ([1, 2, 3, 4, 5, 6], 4),  # the whole entry, then the rest
    ([1, 2, 7], None),  # 2 shared tokens: below min_reuse_tokens
    ([9, 1, 2, 3], None),  # nothing shared at the start
])
def test_what_a_prompt_reuses(prompt, reused) -> None:
    cache = PrefixCache(max_tokens=100, min_reuse_tokens=3)
    cache.store([1, 2, 3, 4], fake_layers(4))
    hit = cache.lookup(prompt)
    assert (hit.length if hit else None) == reused


def test_an_entry_that_a_new_one_extends_is_dropped() -> None:
    cache = PrefixCache(max_tokens=100, min_reuse_tokens=1)
    cache.store([1, 2, 3], fake_layers(3))  # a prompt, as soon as it is prefilled
    cache.store([1, 2, 9], fake_layers(3))  # another prompt: shares a prefix, extends nothing
    cache.store([1, 2, 3, 4, 5], fake_layers(5))  # the first prompt's row finished
    assert sorted(cache._entries) == [(1, 2, 3, 4, 5), (1, 2, 9)]
    assert (cache.cached_tokens, cache.stats.replaced_entries, cache.stats.evicted_entries) == (8, 1, 0)


def test_least_recently_used_entries_go_first_under_the_token_budget() -> None:
    cache = PrefixCache(max_tokens=10, min_reuse_tokens=1)
    cache.store([1, 1, 1, 1], fake_layers(4))
    cache.store([2, 2, 2, 2], fake_layers(4))
    assert cache.lookup([1, 1, 1, 1, 0]) is not None  # [1...] is now the most recently used
    cache.store([3, 3, 3, 3], fake_layers(4))  # 12 > 10 tokens: [2...] goes
    assert cache.lookup([2, 2, 2, 2, 0]) is None and cache.lookup([1, 1, 1, 1, 0]) is not None
    assert (len(cache), cache.cached_tokens, cache.stats.evicted_entries) == (2, 8, 1)
    cache.store([4] * 11, fake_layers(11))  # larger than the whole budget: not kept
    assert len(cache) == 2


def test_a_new_policy_version_or_a_clear_empties_it_and_zero_turns_it_off() -> None:
    cache = PrefixCache(max_tokens=100, min_reuse_tokens=1)
    cache.sync_version(3)
    cache.store([1, 2, 3], fake_layers(3))
    cache.sync_version(3)
    assert len(cache) == 1
    cache.sync_version(4)
    assert len(cache) == 0 and cache.stats.clears == 1
    off = PrefixCache(max_tokens=0)
    off.store([1, 2, 3], fake_layers(3))
    assert not off.enabled and len(off) == 0 and off.lookup([1, 2, 3, 4]) is None
    with pytest.raises(ValueError, match="3 tokens but a KV of 2 positions"):
        cache.store([1, 2, 3], fake_layers(2))
    with pytest.raises(ValueError, match="max_tokens=-1"):
        PrefixCache(max_tokens=-1)


@pytest.fixture(scope="module")
def holder(tiny_model_dir: Path) -> ModelHolder:
    return ModelHolder(tiny_model_dir)


def test_a_prefill_after_a_cached_prefix_equals_a_full_prefill(holder: ModelHolder) -> None:
    prompt = list(range(300, 340))
    full, logits_full = kv_batch.prefill(holder.model, [prompt], holder.pad_token_id)
    first, _ = kv_batch.prefill(holder.model, [prompt[:25], list(range(50, 80))], holder.pad_token_id)
    prefix = kv_batch.row_layers(first, 0)  # row 0 is left padded in that batch: its KV must not depend on it
    resumed, logits_resumed = kv_batch.prefill_after(holder.model, prompt, prefix)
    assert torch.allclose(logits_full, logits_resumed, atol=1e-4)
    assert resumed.positions_B.tolist() == [40] and resumed.mask_BT.shape == (1, 40)
    for (k_full, v_full), (k_resumed, v_resumed) in zip(kv_batch.row_layers(full, 0),
                                                          kv_batch.row_layers(resumed, 0), strict=True):
        assert torch.allclose(k_full, k_resumed, atol=1e-4) and torch.allclose(v_full, v_resumed, atol=1e-4)
    with pytest.raises(ValueError, match="leave at least one prompt token"):
        kv_batch.prefill_after(holder.model, prompt[:25], prefix)


@pytest.fixture()
def cached_scheduler(holder: ModelHolder):
    scheduler = GenerationScheduler(holder, max_batch_size=8, prefix_cache_tokens=4096)
    scheduler.start()
    yield scheduler
    scheduler.stop()


def test_an_agents_next_call_reuses_its_history_and_stays_exact(cached_scheduler, reference_model) -> None:
    log: list = []
    history = list(range(100, 150))
    first = submit(cached_scheduler, "first", log, history, max_tokens=12, seed=3)
    assert first.done.wait(60)
    reply = [t.token_id for t in first.tokens()]
    follow_up = history + reply + list(range(400, 420))  # the conversation so far, then the next user turn
    second = submit(cached_scheduler, "second", log, follow_up, max_tokens=10, seed=4, n=2)
    assert second.done.wait(60)
    stats = cached_scheduler.prefix_cache.stats
    assert stats.hit_tokens == len(history) + len(reply) - 1  # the first call's KV: all but its last token
    for choice in range(2):
        tokens = second.tokens(choice)
        assert_teacher_forced(reference_model, follow_up, [t.token_id for t in tokens], [t.logprob for t in tokens])
    # The follow-up's two finished choices: each replaced what it extends (the first call's prompt by its finished row,
    # that row by the follow-up's prompt, that prompt by the first finished choice).
    assert len(cached_scheduler.prefix_cache) == 2 and cached_scheduler.prefix_cache.stats.replaced_entries == 3


def test_greedy_answers_are_the_same_with_and_without_the_cache(cached_scheduler, holder) -> None:
    plain = GenerationScheduler(holder, max_batch_size=8)
    plain.start()
    try:
        answers = []
        for scheduler in (cached_scheduler, plain):
            log: list = []
            first = submit(scheduler, "first", log, list(range(500, 560)), max_tokens=8, sampling=GREEDY)
            assert first.done.wait(60)
            reply = [t.token_id for t in first.tokens()]
            second = submit(scheduler, "second", log, list(range(500, 560)) + reply + [7, 8, 9], max_tokens=8,
                            sampling=GREEDY)
            assert second.done.wait(60)
            answers.append((reply, [t.token_id for t in second.tokens()]))
        assert answers[0] == answers[1]
        assert cached_scheduler.prefix_cache.stats.hit_tokens > 0 and plain.prefix_cache.stats.hit_tokens == 0
    finally:
        plain.stop()


def test_a_weight_operation_clears_the_cache(cached_scheduler) -> None:
    log: list = []
    done = submit(cached_scheduler, "row", log, list(range(600, 640)), max_tokens=4, seed=1)
    assert done.done.wait(60)
    assert len(cached_scheduler.prefix_cache) == 1
    assert cached_scheduler.control(lambda: "weights swapped").result(timeout=60) == "weights swapped"
    body = prefix_cache_body(cached_scheduler.prefix_cache)
    assert (body["entries"], body["cached_tokens"], body["clears"]) == (0, 0, 1)
    assert body["max_tokens"] == 4096 and body["stored_entries"] == 2  # the prompt's, then the finished row's


def test_a_group_s_prompts_arriving_together_prefill_once_and_stay_exact(holder, reference_model) -> None:
    scheduler = GenerationScheduler(holder, max_batch_size=8, prefix_cache_tokens=4096)
    log: list = []
    group = list(range(700, 760))
    other = list(range(700, 730)) + list(range(900, 920))  # shares the first 30 tokens (a system prompt)
    alone = list(range(1000, 1040))
    prompts = [group, group, group, other, alone]
    collectors = [submit(scheduler, f"r{i}", log, prompt, max_tokens=6, seed=i) for i, prompt in enumerate(prompts)]
    scheduler.start()  # all five are admitted in one step
    try:
        for collector, prompt in zip(collectors, prompts, strict=True):
            assert collector.done.wait(60)
            tokens = collector.tokens()
            assert_teacher_forced(reference_model, prompt, [t.token_id for t in tokens], [t.logprob for t in tokens])
        # The first group member and the unrelated prompt are prefilled together; the other two members run only
        # their last prompt token, the prompt sharing 30 tokens runs the other 20.
        assert scheduler.prefix_cache.stats.hit_tokens == 2 * (len(group) - 1) + 30
    finally:
        scheduler.stop()


def test_a_prompt_arriving_while_its_group_mate_generates_reuses_its_prompt(cached_scheduler, reference_model) -> None:
    log: list = []
    prompt = list(range(1100, 1170))
    first = submit(cached_scheduler, "first", log, prompt, max_tokens=40, seed=1)
    wait_for_tokens(first, 2)
    second = submit(cached_scheduler, "second", log, prompt, max_tokens=5, seed=2)
    assert second.done.wait(60) and first.done.wait(60)
    order = [name for name, event in log if isinstance(event, TokenEvent)]
    assert order.index("second") < max(i for i, name in enumerate(order) if name == "first"), "they must overlap"
    assert cached_scheduler.prefix_cache.stats.hit_tokens == len(prompt) - 1
    tokens = second.tokens()
    assert_teacher_forced(reference_model, prompt, [t.token_id for t in tokens], [t.logprob for t in tokens])
