"""Edges of sample building: prompt overflow dropped by default, missing logprobs masked, cut-off calls masked."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.trainer.loop_support import call, group
from trainer.advantages import AdvantageConfig
from trainer.prepared_step import prepare_step
from trainer.sample_masks import mask_tokens
from trainer.samples import RecordedCall, RecordedChoice, SampleLimits, build_samples


def recorded(seq, prompt, response, logprobs=None, finish="stop", choices=()):
    logprobs = tuple(logprobs) if logprobs is not None else tuple(-1.0 - i / 10 for i in range(len(response)))
    return RecordedCall("r0", "g0", seq, tuple(prompt), tuple(response), logprobs, 0, True, finish, tuple(choices))


def test_a_too_long_prompt_drops_the_call_by_default_and_is_counted():
    calls = [recorded(0, (1, 2), (3,)), recorded(1, (1, 2, 3, 4), (5,))]
    dropped = build_samples(calls, limits=SampleLimits(max_prompt_tokens=3))
    assert [s.call_seqs for s in dropped.samples] == [(0,)]
    assert dropped.stats.prompts_dropped == 1 and dropped.stats.prompts_truncated == 0
    truncated = build_samples(calls, limits=SampleLimits(max_prompt_tokens=3, prompt_overflow="truncate"))
    assert [s.token_ids_T.tolist() for s in truncated.samples] == [[1, 2, 3], [2, 3, 4, 5]]
    assert truncated.stats.prompts_truncated == 1


@pytest.mark.parametrize("missing", [math.nan, -math.inf, math.inf])
def test_a_missing_logprob_masks_that_token_and_is_counted(missing):
    calls = [recorded(0, (1, 2), (3, 4, 5), (-0.1, missing, -0.3)), recorded(1, (1, 2, 3, 4, 5, 6), (7,), (-0.7,))]
    built = build_samples(calls)
    (sample,) = built.samples
    assert sample.loss_mask_T.astype(int).tolist() == [0, 0, 1, 0, 1, 0, 1]
    assert np.isfinite(sample.logprobs_T).all()
    assert sample.logprobs_T.tolist() == pytest.approx([0, 0, -0.1, 0, -0.3, 0, -0.7])
    assert [(s.start, s.end, s.call_seq) for s in sample.spans] == [(2, 3, 0), (4, 5, 0), (6, 7, 1)]
    assert sample.num_trainable_tokens == 3 and built.stats.logprobs_missing == 1
    assert built.stats.trainable_tokens == 3


def test_a_sample_whose_logprobs_are_all_missing_is_dropped():
    built = build_samples([recorded(0, (1,), (2, 3), (math.nan, math.nan))])
    assert built.samples == () and built.stats.logprobs_missing == 2


def test_missing_logprobs_no_longer_reach_the_batch():
    def calls(rid):
        return (call(rid, 0, 0, [5, 6], response_logprobs=[-0.5, math.nan]),)

    built = prepare_step([group("g", {"a": 1.0, "b": 0.0}, calls=calls)], AdvantageConfig(), SampleLimits())
    assert all(np.isfinite(s.logprobs_T).all() for s in built.batch.samples)
    assert built.metrics["samples/logprobs_missing"] == 2.0


@pytest.mark.parametrize(("length_calls", "mask", "masked"), [
    ("train", [0, 1, 1, 0, 1], 0),
    ("mask", [0, 0, 0, 0, 1], 1),
])
def test_calls_cut_off_for_length_are_masked_when_configured(length_calls, mask, masked):
    calls = [recorded(0, (1,), (2, 3), finish="length"), recorded(1, (1, 2, 3, 4), (5,))]
    built = build_samples(calls, limits=SampleLimits(length_calls=length_calls))
    (sample,) = built.samples  # the cut-off response stays the context the next call extends
    assert sample.loss_mask_T.astype(int).tolist() == mask and built.stats.calls_length_masked == masked


def test_a_cut_off_extra_choice_is_masked_and_its_sibling_kept():
    choice = RecordedChoice(1, (), (8, 9), (-0.2, -0.3), "length")
    built = build_samples([recorded(0, (1,), (2, 3), choices=[choice])], limits=SampleLimits(length_calls="mask"))
    assert [s.spans[0].choice for s in built.samples] == [0] and built.stats.calls_length_masked == 1


@settings(max_examples=100, deadline=None)
@given(st.lists(st.booleans(), min_size=1, max_size=12), st.lists(st.booleans(), min_size=12, max_size=12))
def test_mask_tokens_keeps_spans_consistent_with_the_mask(response_mask, drop):
    response = tuple(range(10, 10 + len(response_mask)))
    (sample,) = build_samples([recorded(0, (1, 2), response)]).samples
    drop_T = np.array([False, False, *drop[: len(response)]])
    masked = mask_tokens(sample, drop_T)
    span_mask = np.zeros(sample.num_tokens, dtype=bool)
    for span in masked.spans:
        assert span.end > span.start and not span_mask[span.start : span.end].any()
        span_mask[span.start : span.end] = True
    assert (span_mask == masked.loss_mask_T).all() and (masked.loss_mask_T == (sample.loss_mask_T & ~drop_T)).all()
    assert masked.num_trainable_tokens == int(masked.loss_mask_T.sum())
