"""Samples → verl rows (pure, no verl needed): layout, masks, padding, advantages, weights, rank groups, provenance."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainer.backends.verl_batch import (
    FILLER_SAMPLE_INDEX,
    ROLLOUT_LOGPROBS_FIELD,
    samples_from_rows,
    split_point,
    to_verl_rows,
    with_recomputed_logprobs,
)
from trainer.samples import RecordedCall, Sample, build_samples
from trainer.scheduling import ScheduleConfig, schedule

PAD = 0
REFERENCE = Path("/work/shared/reference/verl-0.9.1-vectors.json")


def call(rollout: str, seq: int, prompt: tuple[int, ...], response: tuple[int, ...], version: int = 0) -> RecordedCall:
    logprobs = tuple(-0.01 * t for t in response)
    return RecordedCall(rollout, f"g-{rollout[0]}", seq, prompt, response, logprobs, version, True, "stop")


def multi_turn_rollout(rollout: str, base: int) -> list[RecordedCall]:
    """Two merged calls: prompt (3) → response (2), observation (2) → response (3), sampled by versions 4 and 5."""
    prompt = (base + 1, base + 2, base + 3)
    first = (base + 4, base + 5)
    observation = (base + 6, base + 7)
    second = (base + 8, base + 9, base + 10)
    return [call(rollout, 0, prompt, first, 4), call(rollout, 1, prompt + first + observation, second, 5)]


def rows_for(samples, advantages, *, dp_size=1, mode="rollout-token-mean", budget=64):
    plan = schedule(samples, ScheduleConfig(num_workers=dp_size, max_tokens_per_micro_batch=budget))
    (update,) = plan.updates
    return to_verl_rows(samples, np.asarray(advantages), update, dp_size=dp_size, agg_mode=mode, pad_token_id=PAD)


def test_multi_turn_sample_puts_observations_in_the_response_with_mask_zero():
    (sample,) = build_samples(multi_turn_rollout("a", 100)).samples
    rows = rows_for([sample], [1.5])
    assert split_point(sample) == 3
    np.testing.assert_array_equal(rows.prompts, [[101, 102, 103]])
    np.testing.assert_array_equal(rows.responses, [[104, 105, 106, 107, 108, 109, 110]])
    np.testing.assert_array_equal(rows.response_mask, [[1, 1, 0, 0, 1, 1, 1]])
    np.testing.assert_allclose(rows.old_log_probs, [[-1.04, -1.05, 0, 0, -1.08, -1.09, -1.10]], rtol=1e-6)
    np.testing.assert_array_equal(rows.advantages, [[1.5, 1.5, 0, 0, 1.5, 1.5, 1.5]])
    np.testing.assert_array_equal(rows.policy_versions, [[4, 4, -1, -1, 5, 5, 5]])
    np.testing.assert_array_equal(rows.position_ids, [np.arange(10)])
    assert rows.trainable_tokens == 5


def test_prompts_are_left_padded_and_responses_right_padded():
    samples = build_samples([call("a", 0, (1,), (2, 3, 4)), call("b", 0, (5, 6, 7), (8,))]).samples
    rows = rows_for(samples, [1.0, -1.0])
    by_rollout = {rows.rollout_id[r]: r for r in range(rows.num_rows)}
    a, b = by_rollout["a"], by_rollout["b"]
    assert rows.prompts.shape == (2, 3) and rows.responses.shape == (2, 3)
    np.testing.assert_array_equal(rows.prompts[a], [PAD, PAD, 1])
    np.testing.assert_array_equal(rows.responses[a], [2, 3, 4])
    np.testing.assert_array_equal(rows.attention_mask[a], [0, 0, 1, 1, 1, 1])
    np.testing.assert_array_equal(rows.position_ids[a], [0, 0, 0, 1, 2, 3])
    np.testing.assert_array_equal(rows.prompts[b], [5, 6, 7])
    np.testing.assert_array_equal(rows.responses[b], [8, PAD, PAD])
    np.testing.assert_array_equal(rows.attention_mask[b], [1, 1, 1, 1, 0, 0])
    np.testing.assert_array_equal(rows.response_mask[b], [1, 0, 0])
    np.testing.assert_array_equal(rows.input_ids, np.concatenate([rows.prompts, rows.responses], axis=1))
    np.testing.assert_array_equal(rows.advantages[b], [-1.0, 0, 0])


def test_rollout_token_mean_weights_reproduce_the_verl_reference_value():
    """verl vectors: rows 0 and 1 one rollout, row 2 another → 5.25."""
    vectors = json.loads(REFERENCE.read_text())["agg_loss"]
    loss_mat = np.asarray(vectors["loss_mat"], dtype=np.float64)
    lengths = [4, 2, 1]
    samples = build_samples(
        [
            call("a", 0, (1,), tuple(range(10, 10 + lengths[0]))),
            call("a", 1, (2,), tuple(range(20, 20 + lengths[1]))),
            call("b", 0, (3,), tuple(range(30, 30 + lengths[2]))),
        ]
    ).samples
    rows = rows_for(samples, [1.0, 1.0, 1.0])
    value = sum(
        float((loss_mat[rows.sample_index[r], : rows.responses.shape[1]] * rows.token_weights[r]).sum())
        for r in range(rows.num_rows)
    )
    assert value == pytest.approx(vectors["rollout-token-mean_if_rows_0_1_are_one_rollout_and_row_2_another"], 1e-6)


@pytest.mark.parametrize(
    ("mode", "expected_total"),
    [("rollout-token-mean", 1.0), ("token-mean", 1.0), ("seq-mean-token-mean", 1.0), ("seq-mean-token-sum", 7 / 3)],
)
def test_token_weights_sum_as_each_mode_intends(mode, expected_total):
    """Weights over all tokens: 1 for the means; for seq-mean-token-sum, tokens / sequences."""
    samples = build_samples([call("a", 0, (1,), (2, 3, 4, 5)), call("a", 1, (6,), (7, 8)), call("b", 0, (9,), (10,))])
    rows = rows_for(samples.samples, [1.0, 1.0, 1.0], mode=mode)
    assert float(rows.token_weights.astype(np.float64).sum()) == pytest.approx(expected_total, rel=1e-6)
    assert (rows.token_weights[rows.response_mask == 0] == 0).all()


def test_rollout_token_mean_gives_each_rollout_equal_total_weight_however_it_split():
    samples = build_samples(
        [call("a", 0, (1,), (2, 3)), call("a", 1, (4,), (5, 6, 7)), call("a", 2, (8,), (9,)), call("b", 0, (1,), (2,))]
    ).samples
    rows = rows_for(samples, [0.5, 0.5, 0.5, -0.5])
    totals = {rid: 0.0 for rid in ("a", "b")}
    for r in range(rows.num_rows):
        totals[rows.rollout_id[r]] += float(rows.token_weights[r].sum())
    assert totals == pytest.approx({"a": 0.5, "b": 0.5}, rel=1e-6)


def test_ranks_get_equal_row_counts_with_zero_weight_fillers():
    samples = build_samples(
        [call("a", 0, (1,), tuple(range(2, 40))), call("b", 0, (1,), (2,)), call("c", 0, (1,), (3,))]
    )
    rows = rows_for(samples.samples, [1.0, 2.0, 3.0], dp_size=2)
    assert rows.num_rows % 2 == 0
    half = rows.num_rows // 2
    rank_of = {int(rows.sample_index[r]): r // half for r in range(rows.num_rows) if rows.sample_index[r] >= 0}
    assert rank_of[0] != rank_of[1] == rank_of[2]  # Karmarkar-Karp: the long sample alone on one rank
    fillers = rows.sample_index == FILLER_SAMPLE_INDEX
    assert fillers.sum() == 1
    assert (rows.token_weights[fillers] == 0).all() and (rows.response_mask[fillers] == 0).all()
    assert (rows.attention_mask[fillers].sum(axis=1) == 2).all()


def test_schedule_for_a_different_worker_count_is_rejected():
    samples = build_samples([call("a", 0, (1,), (2,))]).samples
    (update,) = schedule(samples, ScheduleConfig(num_workers=1)).updates
    with pytest.raises(ValueError, match="num_workers=dp_size"):
        to_verl_rows(samples, np.ones(1), update, dp_size=2, agg_mode="token-mean", pad_token_id=PAD)


def test_trainable_first_token_is_rejected():
    sample = build_samples([call("a", 0, (1,), (2,))]).samples[0]
    mask = np.ones(sample.num_tokens, dtype=bool)
    broken = Sample(
        sample.rollout_id,
        sample.group_id,
        sample.call_seqs,
        sample.spans,
        sample.token_ids_T,
        mask,
        sample.logprobs_T,
        sample.policy_versions_T,
    )
    with pytest.raises(ValueError, match="position 0"):
        split_point(broken)


rollout_strategy = st.lists(
    st.tuples(st.integers(1, 5), st.lists(st.tuples(st.integers(0, 3), st.integers(1, 4)), min_size=1, max_size=3)),
    min_size=1,
    max_size=6,
)


def build_random(spec) -> list[Sample]:
    """Each rollout: a prompt, then calls that add `obs` observation tokens and `resp` response tokens."""
    calls, token = [], 1
    for index, (prompt_len, turns) in enumerate(spec):
        context = tuple(range(token, token + prompt_len))
        token += prompt_len
        for seq, (obs, resp) in enumerate(turns):
            context = context + tuple(range(token, token + (obs if seq else 0)))
            token += obs if seq else 0
            response = tuple(range(token, token + resp))
            token += resp
            calls.append(call(f"r{index}", seq, context, response, version=seq))
            context = context + response
    return list(build_samples(calls).samples)


@settings(max_examples=60, deadline=None)
@given(spec=rollout_strategy, dp_size=st.integers(1, 3), budget=st.integers(8, 64))
def test_round_trip_restores_every_sample_and_its_provenance(spec, dp_size, budget):
    samples = build_random(spec)
    advantages = np.linspace(-1, 1, len(samples))
    rows = rows_for(samples, advantages, dp_size=dp_size, budget=budget)
    assert rows.num_rows % dp_size == 0
    restored = dict(zip([int(i) for i in rows.sample_index if i >= 0], samples_from_rows(rows), strict=True))
    assert sorted(restored) == list(range(len(samples)))
    for index, sample in enumerate(samples):
        back = restored[index]
        assert (back.rollout_id, back.group_id, back.call_seqs, back.spans) == (
            sample.rollout_id,
            sample.group_id,
            sample.call_seqs,
            sample.spans,
        )
        np.testing.assert_array_equal(back.token_ids_T, sample.token_ids_T)
        np.testing.assert_array_equal(back.loss_mask_T, sample.loss_mask_T)
        np.testing.assert_array_equal(back.logprobs_T, sample.logprobs_T)
        np.testing.assert_array_equal(back.policy_versions_T, sample.policy_versions_T)
    for r in range(rows.num_rows):
        index = int(rows.sample_index[r])
        expected = 0.0 if index == FILLER_SAMPLE_INDEX else advantages[index]
        np.testing.assert_allclose(rows.advantages[r][rows.response_mask[r] == 1], np.float32(expected))
    assert int(rows.response_mask.sum()) == rows.trainable_tokens == sum(s.num_trainable_tokens for s in samples)
    assert float(rows.token_weights.astype(np.float64).sum()) == pytest.approx(1.0, rel=1e-5)


def decoupled_fixture():
    """Three rollouts on two ranks (one filler row): multi-turn (observations inside the response), single-turn."""
    calls = multi_turn_rollout("a", 0) + [call("b", 0, (50, 51), (52, 53, 54), 5), call("c", 0, (60,), (61,), 5)]
    samples = build_samples(calls).samples
    rows = rows_for(samples, [1.0, -1.0, 0.5], dp_size=2)
    assert (rows.sample_index == FILLER_SAMPLE_INDEX).any()
    return samples, rows


def recomputation_of(rows, off_mask=np.nan):
    """A recomputation distinct from the recorded logprobs on trainable tokens, `off_mask` everywhere else."""
    values = -0.5 - 0.01 * np.arange(rows.response_mask.size, dtype=np.float32).reshape(rows.response_mask.shape)
    return np.where(rows.response_mask == 1, values, off_mask).astype(np.float32)


@pytest.mark.parametrize("off_mask", [np.nan, 0.0, 7.0, -np.inf])
def test_recomputed_rows_carry_the_recomputation_as_old_and_the_recorded_as_rollout_logprobs(off_mask):
    samples, rows = decoupled_fixture()
    recomputed = recomputation_of(rows, off_mask)
    decoupled = with_recomputed_logprobs(rows, recomputed)
    mask = rows.response_mask == 1
    np.testing.assert_array_equal(decoupled.old_log_probs[mask], recomputed[mask])
    assert (decoupled.old_log_probs[~mask] == 0).all()  # masked positions (observations, padding, fillers) are zero
    assert decoupled.old_log_probs.dtype == np.float32
    np.testing.assert_array_equal(decoupled.rollout_log_probs, rows.old_log_probs)
    np.testing.assert_array_equal(decoupled.recorded_log_probs, rows.old_log_probs)
    fields = decoupled.tensor_fields()
    assert ROLLOUT_LOGPROBS_FIELD == "rollout_log_probs" and ROLLOUT_LOGPROBS_FIELD not in rows.tensor_fields()
    np.testing.assert_array_equal(fields[ROLLOUT_LOGPROBS_FIELD], rows.old_log_probs)
    np.testing.assert_array_equal(fields["old_log_probs"], decoupled.old_log_probs)
    for name in ("input_ids", "response_mask", "advantages", "token_weights", "policy_versions", "sample_index"):
        np.testing.assert_array_equal(fields[name], rows.tensor_fields()[name])
    restored = samples_from_rows(decoupled)  # the samples keep their recorded logprobs
    for sample in samples:
        (back,) = [s for s in restored if s.rollout_id == sample.rollout_id]
        np.testing.assert_array_equal(back.logprobs_T, sample.logprobs_T)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda rows, r: r[:-1], r"shape \(\d+, \d+\) but the update's rows have \d+ rows x \d+ response columns"),
        (lambda rows, r: r[:, :-1], "response columns"),
        (lambda rows, r: np.pad(r, ((0, 0), (0, 1))), "response columns"),
        (lambda rows, r: r.reshape(-1), "response columns"),
        (
            lambda rows, r: np.where(rows.response_mask == 1, np.nan, r),
            r"not finite on \d+ trainable token\(s\), first at row \d+ \(rollout '[abc]'\) response column \d+",
        ),
        (lambda rows, r: np.where(rows.response_mask == 1, np.inf, r), r"not finite .*\(rollout '[abc]'\)"),
    ],
    ids=["rows", "fewer-columns", "more-columns", "flat", "nan", "inf"],
)
def test_recomputation_of_the_wrong_shape_or_not_finite_is_refused_naming_the_mismatch(change, message):
    _, rows = decoupled_fixture()
    with pytest.raises(ValueError, match=message):
        with_recomputed_logprobs(rows, change(rows, recomputation_of(rows, 0.0)))


def test_rows_are_recomputed_once():
    _, rows = decoupled_fixture()
    decoupled = with_recomputed_logprobs(rows, recomputation_of(rows))
    with pytest.raises(ValueError, match="already carry recomputed logprobs"):
        with_recomputed_logprobs(decoupled, recomputation_of(rows))
