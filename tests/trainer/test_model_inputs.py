"""Micro-batch model inputs: packed and padded layouts cover every trainable token once, at the right place."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from trainer.backends.model_inputs import build_model_inputs
from trainer.losses import LossDenominators
from trainer.samples import RecordedCall, build_samples
from trainer.scheduling import ScheduleConfig, schedule

PAD = 0


def make_samples(shapes: list[tuple[int, int, int]]):
    """One single-call rollout per (rollout index, prompt length, response length); tokens are distinct."""
    calls = []
    next_token = 1
    for index, (rollout, prompt_len, response_len) in enumerate(shapes):
        prompt = tuple(range(next_token, next_token + prompt_len))
        response = tuple(range(next_token + prompt_len, next_token + prompt_len + response_len))
        next_token += prompt_len + response_len
        logprobs = tuple(-float(token) / 1000 for token in response)
        calls.append(RecordedCall(f"r{rollout}", "g", index, prompt, response, logprobs, 0, True, "stop"))
    return build_samples(calls).samples


def all_inputs(samples, layout: str, budget: int, pad_to_multiple: int = 1):
    plan = schedule(
        samples, ScheduleConfig(max_tokens_per_micro_batch=budget, layout=layout, pad_to_multiple=pad_to_multiple)
    )
    denominators = LossDenominators.from_sequences(
        [s.rollout_id for s in samples], [s.num_trainable_tokens for s in samples]
    )
    advantages_S = np.arange(len(samples), dtype=np.float64) + 0.5
    for update in plan.updates:
        for micro_batch in update.workers[0].micro_batches:
            yield (
                micro_batch,
                build_model_inputs(
                    samples,
                    advantages_S,
                    micro_batch,
                    layout=layout,
                    denominators=denominators,
                    agg_mode="rollout-token-mean",
                    pad_token_id=PAD,
                ),
            )


shapes_strategy = st.lists(st.tuples(st.integers(0, 3), st.integers(1, 6), st.integers(1, 6)), min_size=1, max_size=8)


@settings(max_examples=60, deadline=None)
@given(
    shapes=shapes_strategy,
    layout=st.sampled_from(["packed", "padded"]),
    budget=st.integers(4, 40),
    multiple=st.sampled_from([1, 4]),
)
def test_every_trainable_token_is_targeted_once_from_its_own_sequence(shapes, layout, budget, multiple):
    samples = make_samples(shapes)
    seen: list[int] = []
    for micro_batch, inputs in all_inputs(samples, layout, budget, multiple):
        if layout == "padded":
            longest = max(seq.num_tokens for seq in micro_batch.sequences)
            assert inputs.input_ids.shape[0] == len(micro_batch.sequences)
            assert inputs.input_ids.shape[1] == max(longest, micro_batch.slots // len(micro_batch.sequences))
        rows, cols = inputs.target_rows_N, inputs.target_cols_N
        # The predicted token sits right after its predicting position, in the same sequence.
        assert torch.equal(inputs.input_ids[rows, cols + 1], inputs.target_ids_N)
        assert torch.equal(inputs.position_ids[rows, cols + 1], inputs.position_ids[rows, cols] + 1)
        # Rollout logprobs travel with their tokens (the fixture encodes them as -token / 1000).
        assert torch.allclose(inputs.loss.old_logprobs_T, -inputs.target_ids_N.float() / 1000)
        assert bool((inputs.loss.weights_T > 0).all())
        if inputs.attention_mask is not None:
            assert int(inputs.attention_mask.sum()) == micro_batch.num_tokens
        seen.extend(inputs.target_ids_N.tolist())
    expected = [int(t) for s in samples for t in s.token_ids_T[s.loss_mask_T]]
    assert sorted(seen) == sorted(expected) and len(set(seen)) == len(seen)


@settings(max_examples=30, deadline=None)
@given(shapes=shapes_strategy, budget=st.integers(4, 40))
def test_packed_positions_restart_for_every_sequence(shapes, budget):
    samples = make_samples(shapes)
    for micro_batch, inputs in all_inputs(samples, "packed", budget):
        assert inputs.attention_mask is None and inputs.input_ids.shape == (
            1,
            max(micro_batch.slots, micro_batch.num_tokens),
        )
        for seq in micro_batch.sequences:
            window = inputs.position_ids[0, seq.offset : seq.offset + seq.num_tokens]
            assert window.tolist() == list(range(seq.num_tokens))


def test_advantages_and_weights_follow_each_sequence():
    samples = make_samples([(0, 2, 3), (1, 3, 1)])
    ((micro_batch, inputs),) = all_inputs(samples, "padded", 100)
    by_token = {
        int(t): (float(a), float(w))
        for t, a, w in zip(inputs.target_ids_N, inputs.loss.advantages_T, inputs.loss.weights_T, strict=True)
    }
    # Sample 0 (tokens 3-5, advantage 0.5) is rollout r0 with 3 tokens; sample 1 (token 9, 1.5) is r1 with 1.
    assert by_token == {3: (0.5, 1 / 6), 4: (0.5, 1 / 6), 5: (0.5, 1 / 6), 9: (1.5, 1 / 2)}


def test_trainable_first_token_is_refused():
    samples = make_samples([(0, 2, 2)])
    broken = samples[0]
    mask = broken.loss_mask_T.copy()
    mask[0] = True
    object.__setattr__(broken, "loss_mask_T", mask)
    with pytest.raises(ValueError, match="position 0"):
        list(all_inputs([broken], "packed", 100))


def make_family_samples(shapes: list[tuple[int, int, int]]):
    """One single-call rollout per (prompt choice, prompt length, response length): equal choices and lengths give
    equal prompts (a family); responses are distinct."""
    calls = []
    for index, (choice, prompt_len, response_len) in enumerate(shapes):
        prompt = tuple(100 * choice + t for t in range(1, prompt_len + 1))
        response = tuple(10_000 + 100 * index + t for t in range(response_len))
        logprobs = tuple(-0.5 for _ in response)
        calls.append(RecordedCall(f"r{index}", "g", 0, prompt, response, logprobs, 0, True, "stop"))
    return build_samples(calls).samples


@settings(max_examples=60, deadline=None)
@given(shapes=st.lists(st.tuples(st.integers(0, 2), st.integers(1, 5), st.integers(1, 4)), min_size=1, max_size=8),
       budget=st.integers(4, 40))
def test_a_shared_prefix_target_sees_exactly_its_own_sample_s_context(shapes, budget):
    samples = make_family_samples(shapes)
    seen: list[int] = []
    for micro_batch, inputs in all_inputs(samples, "shared_prefix", budget):
        prefix = inputs.prefix
        for n, (row, col) in enumerate(zip(inputs.target_rows_N.tolist(), inputs.target_cols_N.tolist(), strict=True)):
            sample = samples[micro_batch.sequences[row].sample_index]
            start = int(inputs.position_ids[row, 0])  # the row continues its family's prefix of `start` tokens
            context = []
            if prefix is not None:
                family = int(prefix.family_R[row])
                assert int(prefix.attention_mask[family].sum()) == max(start, 1)
                context = prefix.input_ids[family, :start].tolist()
                assert inputs.attention_mask[row, :prefix.input_ids.shape[1]].tolist() == \
                    [1] * start + [0] * (prefix.input_ids.shape[1] - start)
            else:
                assert start == 0
            context += inputs.input_ids[row, : col + 1].tolist()
            position = start + col + 1
            assert context == sample.token_ids_T[:position].tolist()
            assert int(inputs.target_ids_N[n]) == int(sample.token_ids_T[position]) and sample.loss_mask_T[position]
            seen.append(id(sample) * 1000 + position)
    assert len(seen) == len(set(seen)) == sum(s.num_trainable_tokens for s in samples)
