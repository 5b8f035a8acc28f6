"""Policy loss: verl 0.9.1 reference values, aggregation modes, micro-batch invariance, gradients."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.trainer.verl_support import require_verl
from trainer.losses import (
    AGG_MODES,
    LossBatch,
    LossConfig,
    LossDenominators,
    agg_loss,
    kl_penalty_T,
    policy_loss,
    ppo_clip_T,
)

# From ../shared/reference/verl-0.9.1-vectors.json.
LOSS_MAT = torch.tensor([[1.0, 2, 3, 4], [5, 6, 0, 0], [7, 0, 0, 0]], dtype=torch.float64)
MASK = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 0, 0]])
RATIOS = torch.tensor([0.5, 0.9, 1.1, 1.5, 0.5, 5.0], dtype=torch.float64)
ADVANTAGES = torch.tensor([1.0, 1, 1, 1, -1, -1], dtype=torch.float64)


@pytest.mark.parametrize(
    ("mode", "rollouts", "expected"),
    [
        ("token-mean", None, 4.0),
        ("seq-mean-token-sum", None, 9.333333),
        ("seq-mean-token-mean", None, 5.0),
        ("rollout-token-mean", ["a", "a", "b"], 5.25),
        ("rollout-token-mean", None, 5.0),  # one rollout per row: seq-mean-token-mean
    ],
)
def test_aggregation_matches_verl_reference(mode, rollouts, expected):
    assert float(agg_loss(LOSS_MAT, MASK, mode, rollouts)) == pytest.approx(expected, abs=1e-6)


@pytest.mark.parametrize(
    ("mode", "expected"), [("token-mean", [3.0, 1.0]), ("seq-mean-token-mean", [2.666667, 2.333333])]
)
def test_micro_batch_shares_match_verl_global_denominators(mode, expected):
    denominators = LossDenominators.from_sequences(["0", "1", "2"], [4, 2, 1])
    shares = []
    for rows in ([0, 1], [2]):
        weights = [denominators.token_weight(mode, str(r), int(MASK[r].sum())) for r in rows]
        shares.append(float((LOSS_MAT[rows] * MASK[rows] * torch.tensor(weights)[:, None]).sum()))
    assert shares == pytest.approx(expected, abs=1e-6)


def test_ppo_clip_matches_verl_reference():
    terms = ppo_clip_T(
        torch.log(RATIOS),
        torch.zeros(6, dtype=torch.float64),
        ADVANTAGES,
        clip_low=0.2,
        clip_high=0.2,
        dual_clip_c=3.0,
    )
    assert terms.loss_T.tolist() == pytest.approx([-0.5, -0.9, -1.1, -1.2, 0.8, 3.0])
    assert float(terms.loss_T.mean()) == pytest.approx(0.016667, abs=1e-6)
    assert float(terms.clipped_T.double().mean()) == pytest.approx(0.333333, abs=1e-6)
    assert terms.dual_clipped_T.tolist() == [False] * 5 + [True]
    higher = ppo_clip_T(
        torch.log(RATIOS),
        torch.zeros(6, dtype=torch.float64),
        ADVANTAGES,
        clip_low=0.2,
        clip_high=0.28,
        dual_clip_c=3.0,
    )
    assert higher.loss_T.tolist() == pytest.approx([-0.5, -0.9, -1.1, -1.28, 0.8, 3.0])
    assert float(higher.loss_T.mean()) == pytest.approx(0.003333, abs=1e-6)


def test_dual_clip_can_be_disabled():
    terms = ppo_clip_T(
        torch.log(RATIOS),
        torch.zeros(6, dtype=torch.float64),
        ADVANTAGES,
        clip_low=0.2,
        clip_high=0.2,
        dual_clip_c=None,
    )
    assert terms.loss_T[-1].item() == pytest.approx(5.0) and not terms.dual_clipped_T.any()


@pytest.mark.parametrize(
    ("estimator", "expected"), [("k1", [0.2, 0, -1]), ("k2", [0.02, 0, 0.5]), ("k3", [0.018731, 0, 0.718282])]
)
def test_kl_estimators_match_verl_reference(estimator, expected):
    logp = torch.tensor([-1, -0.5, -2], dtype=torch.float64)
    ref = torch.tensor([-1.2, -0.5, -1], dtype=torch.float64)
    assert kl_penalty_T(logp, ref, estimator).tolist() == pytest.approx(expected, abs=1e-6)


@dataclass(frozen=True)
class Seq:
    """A minimal LossSequence."""

    rollout_id: str
    loss_mask_T: np.ndarray
    logprobs_T: np.ndarray


@st.composite
def batches(draw):
    """Sequences of a few rollouts, their advantages, current logprobs and a split into micro-batches."""
    n = draw(st.integers(1, 8))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    seqs, advantages = [], []
    for _ in range(n):
        length = int(rng.integers(1, 12))
        mask = rng.random(length) < 0.6
        seqs.append(Seq(f"r{rng.integers(0, 3)}", mask, np.where(mask, -rng.random(length) * 3, 0.0)))
        advantages.append(float(rng.normal()))
    cuts = sorted(draw(st.sets(st.integers(1, max(n - 1, 1)), max_size=n - 1))) if n > 1 else []
    return seqs, advantages, cuts, rng


def loss_and_grad(seqs, advantages, parts, config, seed):
    """Sum of micro-batch losses and the gradient w.r.t. the full current-logprob vector."""
    denominators = LossDenominators.from_sequences(
        [s.rollout_id for s in seqs], [int(s.loss_mask_T.sum()) for s in seqs]
    )
    rng = np.random.default_rng(seed)
    total_len = sum(len(s.loss_mask_T) for s in seqs)
    logprobs = torch.tensor(-rng.random(total_len) * 3, dtype=torch.float64, requires_grad=True)
    ref = torch.tensor(-rng.random(total_len) * 3, dtype=torch.float64)
    entropy = torch.tensor(rng.random(total_len), dtype=torch.float64)
    total, offset, metrics = torch.zeros((), dtype=torch.float64), 0, {}
    for part in parts:
        batch = LossBatch.pack(
            [seqs[i] for i in part], [advantages[i] for i in part], denominators, config.agg_mode
        )
        size = batch.weights_T.shape[0]
        batch = replace(batch, ref_logprobs_T=ref[offset : offset + size])
        out = policy_loss(logprobs[offset : offset + size], batch, config, entropy[offset : offset + size])
        total = total + out.loss
        for key, value in out.metrics.items():
            metrics[key] = metrics.get(key, 0.0) + value
        offset += size
    total.backward()
    return float(total.detach()), logprobs.grad.clone(), metrics


@settings(max_examples=60, deadline=None)
@given(batches(), st.sampled_from(AGG_MODES), st.sampled_from(["k1", "k2", "k3"]))
def test_loss_and_gradient_are_invariant_to_micro_batch_splits(batch, mode, estimator):
    seqs, advantages, cuts, rng = batch
    config = LossConfig(agg_mode=mode, kl_coef=0.1, kl_estimator=estimator, entropy_coef=0.01, clip_high=0.28)
    bounds = [0, *cuts, len(seqs)]
    split = [list(range(a, b)) for a, b in zip(bounds, bounds[1:], strict=False) if b > a]
    full_loss, full_grad, full_metrics = loss_and_grad(seqs, advantages, [list(range(len(seqs)))], config, 7)
    split_loss, split_grad, split_metrics = loss_and_grad(seqs, advantages, split, config, 7)
    assert split_loss == pytest.approx(full_loss, rel=1e-9, abs=1e-12)
    torch.testing.assert_close(split_grad, full_grad, rtol=1e-9, atol=1e-12)
    for key, value in full_metrics.items():
        assert split_metrics[key] == pytest.approx(value, rel=1e-9, abs=1e-12)


def padded(rows: list[np.ndarray]) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows of different lengths as a zero-padded loss matrix and its mask."""
    width = max(len(row) for row in rows)
    losses = np.stack([np.pad(row, (0, width - len(row))) for row in rows])
    mask = np.stack([np.arange(width) < len(row) for row in rows])
    return torch.tensor(losses), torch.tensor(mask)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 6), min_size=1, max_size=5), st.integers(0, 1000))
def test_rollout_token_mean_ignores_how_a_rollout_split_into_samples(piece_lengths, seed):
    rng = np.random.default_rng(seed)
    losses, other = rng.normal(size=sum(piece_lengths)), rng.normal(size=3)
    ends = np.cumsum(piece_lengths)
    pieces = [losses[end - length : end] for end, length in zip(ends, piece_lengths, strict=True)]
    whole = agg_loss(*padded([losses, other]), "rollout-token-mean", ["a", "b"])
    split = agg_loss(*padded([*pieces, other]), "rollout-token-mean", ["a"] * len(pieces) + ["b"])
    expected = (losses.mean() + other.mean()) / 2
    assert float(whole) == pytest.approx(expected) and float(split) == pytest.approx(expected)


def test_gradient_raises_logprob_of_positive_and_lowers_negative_advantage_tokens():
    seqs = [
        Seq("a", np.array([False, True, True]), np.array([0.0, -1.0, -1.0])),
        Seq("b", np.array([False, True]), np.array([0.0, -1.0])),
    ]
    denominators = LossDenominators.from_sequences(["a", "b"], [2, 1])
    batch = LossBatch.pack(seqs, [1.0, -1.0], denominators, "rollout-token-mean")
    logprobs = batch.old_logprobs_T.clone().double().requires_grad_(True)
    policy_loss(logprobs, batch, LossConfig()).loss.backward()
    assert logprobs.grad.tolist() == pytest.approx([0.0, -0.25, -0.25, 0.0, 0.5])


def test_kl_needs_reference_logprobs():
    seqs = [Seq("a", np.array([True]), np.array([-1.0]))]
    batch = LossBatch.pack(seqs, [1.0], LossDenominators.from_sequences(["a"], [1]), "token-mean")
    with pytest.raises(ValueError, match="ref_logprobs_T"):
        policy_loss(torch.tensor([-1.0]), batch, LossConfig(kl_coef=0.1))


def test_rollout_missing_from_denominators_is_rejected():
    with pytest.raises(ValueError, match="rollout 'x'"):
        LossDenominators.from_sequences(["a"], [1]).token_weight("rollout-token-mean", "x", 2)


@pytest.mark.parametrize(
    "config",
    [
        {"clip_low": 1.0},
        {"clip_high": -0.1},
        {"dual_clip_c": 1.0},
        {"agg_mode": "sum"},
        {"kl_estimator": "k4"},
    ],
)
def test_invalid_config_is_rejected(config):
    with pytest.raises(ValueError, match="LossConfig"):
        LossConfig(**config)


def test_matches_verl_on_random_inputs():
    core_algos = require_verl("verl.trainer.ppo.core_algos")
    gen = torch.Generator().manual_seed(0)
    loss_mat = torch.randn(6, 9, generator=gen)
    mask = (torch.rand(6, 9, generator=gen) < 0.7).float()
    mask[:, 0] = 1
    for mode in ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean"):
        expected = core_algos.agg_loss(loss_mat=loss_mat, loss_mask=mask, loss_agg_mode=mode)
        assert float(agg_loss(loss_mat, mask, mode)) == pytest.approx(float(expected), rel=1e-5)
    logp, ref = -torch.rand(50, generator=gen) * 3, -torch.rand(50, generator=gen) * 3
    for ours, theirs in (("k1", "kl"), ("k2", "mse"), ("k3", "low_var_kl")):
        torch.testing.assert_close(kl_penalty_T(logp, ref, ours), core_algos.kl_penalty(logp, ref, theirs))


@pytest.mark.parametrize(
    ("log_ratio", "k3"),
    [(float(np.log(2.0)), 1.0 - np.log(2.0)), (float(np.log(0.5)), np.log(2.0) - 0.5), (0.0, 0.0)],
)
def test_approx_kl_k3_estimates_kl_of_the_sampling_policy_to_the_current_one(log_ratio, k3):
    """Tokens were sampled from pi_old, so k3 of KL(pi_old || pi) takes r = pi / pi_old: (r - 1) - log r
    (verl's rollout-correction k3_kl convention); hand-computed: r = 2 gives 1 - ln 2, r = 1/2 gives ln 2 - 1/2."""
    batch = LossBatch(
        old_logprobs_T=torch.tensor([-1.0], dtype=torch.float64),
        advantages_T=torch.tensor([1.0], dtype=torch.float64),
        weights_T=torch.tensor([1.0], dtype=torch.float64),
        token_share_T=torch.tensor([1.0], dtype=torch.float64),
    )
    metrics = policy_loss(torch.tensor([-1.0 + log_ratio], dtype=torch.float64), batch, LossConfig()).metrics
    assert metrics["loss/approx_kl_k3"] == pytest.approx(k3, abs=1e-9)
    assert metrics["loss/ppo_kl"] == pytest.approx(-log_ratio, abs=1e-9)


def test_approx_kl_k3_is_accurate_and_never_negative_in_float32_at_small_log_ratios():
    """At lag 0 the log-ratios are engine-trainer noise (~1e-3): exp(x) - x - 1 in float32 loses the x^2/2 to
    rounding (a sum of noise, negative tokens, a mean of -0.0 logged); expm1(x) - x keeps it."""
    gen = torch.Generator().manual_seed(0)
    log_ratio_T = (torch.randn(4096, generator=gen, dtype=torch.float64) * 1e-3).float()
    share_T = torch.full((4096,), 1.0 / 4096)
    batch = LossBatch(old_logprobs_T=torch.full((4096,), -1.0), advantages_T=torch.ones(4096),
                      weights_T=share_T, token_share_T=share_T)
    metrics = policy_loss(-1.0 + log_ratio_T, batch, LossConfig()).metrics
    exact = float(((torch.expm1(log_ratio_T.double()) - log_ratio_T.double()) * share_T.double()).sum())
    assert metrics["loss/approx_kl_k3"] > 0.0
    assert metrics["loss/approx_kl_k3"] == pytest.approx(exact, rel=1e-3)
