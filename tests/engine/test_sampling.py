"""Sampling math: top-p/top-k masks, greedy rows, seeded draws, raw logprobs."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from engines.serving.sampling import (
    RowSampling,
    inverse_cdf_draw,
    raw_logprobs_BV,
    row_generator,
    sample_tokens_B,
    sampling_probs_V,
    top_k_keep_V,
    top_logprobs_BK,
    top_p_keep_V,
)

GREEDY = RowSampling(temperature=0.0, top_p=1.0, top_k=-1)


@pytest.mark.parametrize(("probs", "top_p", "kept"), [
    ([0.5, 0.3, 0.2], 1.0, [True, True, True]),
    ([0.5, 0.3, 0.2], 0.5, [True, False, False]),
    ([0.5, 0.3, 0.2], 0.51, [True, True, False]),
    ([0.2, 0.5, 0.3], 0.8, [False, True, True]),
    ([0.2, 0.5, 0.3], 0.01, [False, True, False]),
])
def test_top_p_keeps_the_smallest_nucleus(probs: list[float], top_p: float, kept: list[bool]) -> None:
    assert top_p_keep_V(torch.tensor(probs), top_p).tolist() == kept


@given(st.lists(st.floats(0.001, 1.0), min_size=1, max_size=40), st.floats(0.01, 1.0))
@settings(max_examples=200, deadline=None)
def test_top_p_mass_reaches_p_and_dropping_the_least_kept_token_falls_short(weights: list[float],
                                                                          top_p: float) -> None:
    probs_V = torch.tensor(weights, dtype=torch.float64)
    probs_V = probs_V / probs_V.sum()
    keep_V = top_p_keep_V(probs_V, top_p)
    kept_mass = float(probs_V[keep_V].sum())
    assert keep_V.any()
    assert kept_mass >= min(top_p, 1.0) - 1e-9
    if (~keep_V).any():
        assert float(probs_V[keep_V].min()) >= float(probs_V[~keep_V].max())
    assert kept_mass - float(probs_V[keep_V].min()) < top_p + 1e-9


@pytest.mark.parametrize(("top_k", "kept"), [(0, 4), (-1, 4), (1, 1), (2, 2), (9, 4)])
def test_top_k_keeps_k_best(top_k: int, kept: int) -> None:
    logits_V = torch.tensor([0.1, 3.0, -1.0, 2.0])
    keep_V = top_k_keep_V(logits_V, top_k)
    assert int(keep_V.sum()) == kept
    assert bool(keep_V[1])


def test_sampling_probs_apply_temperature_then_filters() -> None:
    logits_V = torch.tensor([2.0, 1.0, 0.0, -5.0])
    probs_V = sampling_probs_V(logits_V, RowSampling(temperature=0.5, top_p=1.0, top_k=2))
    expected = torch.softmax(torch.tensor([4.0, 2.0]), dim=-1)
    assert torch.allclose(probs_V[:2], expected) and probs_V[2:].sum() == 0


def test_greedy_rows_take_argmax_and_sampled_rows_follow_their_generator() -> None:
    logits_BV = torch.tensor([[0.0, 5.0, 1.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    rows = [GREEDY, RowSampling(1.0, 1.0, -1), RowSampling(1.0, 1.0, -1)]
    draws = [sample_tokens_B(logits_BV, rows, [None, row_generator(7, 0), row_generator(7, 1)]).tolist()
             for _ in range(2)]
    assert draws[0] == draws[1] and draws[0][0] == 1
    many = {tuple(sample_tokens_B(logits_BV, rows, [None, row_generator(s, 0), row_generator(s, 0)]).tolist())
            for s in range(30)}
    assert all(a[1] == a[2] for a in many), "same seed and choice must give the same draw"
    assert len({a[1] for a in many}) == 3, "different seeds must explore the distribution"


def test_top_p_sampling_never_leaves_the_nucleus() -> None:
    logits_BV = torch.log(torch.tensor([[0.6, 0.3, 0.05, 0.05]]))
    row = RowSampling(temperature=1.0, top_p=0.8, top_k=-1)
    drawn = {int(sample_tokens_B(logits_BV, [row], [row_generator(s, 0)])[0]) for s in range(200)}
    assert drawn == {0, 1}


def test_mismatched_rows_are_refused_with_counts() -> None:
    with pytest.raises(ValueError, match="2 logit rows, 1 sampling rows"):
        sample_tokens_B(torch.zeros(2, 3), [GREEDY], [None])


@given(st.integers(0, 2**40), st.integers(0, 8))
@settings(max_examples=50, deadline=None)
def test_row_generator_is_reproducible_per_seed_and_choice(seed: int, choice: int) -> None:
    a, b = row_generator(seed, choice), row_generator(seed, choice)
    assert torch.equal(torch.rand(4, generator=a), torch.rand(4, generator=b))
    other = row_generator(seed, choice + 1)
    mine = row_generator(seed, choice)
    assert not torch.equal(torch.rand(4, generator=mine), torch.rand(4, generator=other))


def test_raw_logprobs_normalise_and_top_logprobs_are_sorted() -> None:
    logits_BV = torch.tensor([[1.0, 3.0, 2.0], [0.0, 0.0, 0.0]])
    logprobs_BV = raw_logprobs_BV(logits_BV)
    assert torch.allclose(logprobs_BV.exp().sum(-1), torch.ones(2))
    values_BK, ids_BK = top_logprobs_BK(logprobs_BV, 2)
    assert ids_BK[0].tolist() == [1, 2] and bool(values_BK[0, 0] >= values_BK[0, 1])
    empty_values, empty_ids = top_logprobs_BK(logprobs_BV, 0)
    assert empty_values.shape == (2, 0) and empty_ids.shape == (2, 0)


def test_inverse_cdf_draws_follow_the_distribution_and_skip_zero_mass() -> None:
    probs_V = torch.tensor([0.0, 0.5, 0.0, 0.25, 0.25, 0.0])
    generator = row_generator(0, 0)
    counts = torch.bincount(torch.tensor([inverse_cdf_draw(probs_V, generator) for _ in range(4000)]),
                            minlength=6)
    assert counts[[0, 2, 5]].sum() == 0
    assert torch.allclose(counts.double() / 4000, probs_V.double(), atol=0.03)
