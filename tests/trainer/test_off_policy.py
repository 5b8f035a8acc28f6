"""Off-policy correction and metrics on synthetic tensors: weights and masks by hand, decoupled == standard PPO when
behaviour == proximal, mismatch and ratio statistics by lag."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
import torch

from trainer.losses import LossBatch, LossConfig, policy_loss
from trainer.off_policy import OffPolicyConfig, correction_T
from trainer.off_policy_metrics import OffPolicyMeter, finish, merge_raw, raw_terms, target_layout

LN = math.log

# Two sequences: tokens 0-1 are sequence 7, tokens 2-4 sequence 9. Ratios pi_prox / pi_behav per token:
RATIOS = [3.0, 0.5, 1.2, 1.0, 0.9]
SEQ_IDS = torch.tensor([7, 7, 9, 9, 9])
BEHAVIOUR = torch.tensor([-1.0, -2.0, -0.5, -3.0, -0.1], dtype=torch.float64)
PROXIMAL = BEHAVIOUR + torch.log(torch.tensor(RATIOS, dtype=torch.float64))
# Sequence products: 1.5 and 1.08; geometric means: sqrt(1.5) = 1.2247 and 1.08 ** (1/3) = 1.0260.


@pytest.mark.parametrize(
    ("config", "decoupled", "factor", "keep", "truncated"),
    [
        # bypass, no masks: nothing changes
        (OffPolicyConfig(), False, [1, 1, 1, 1, 1], [1, 1, 1, 1, 1], [0, 0, 0, 0, 0]),
        # decoupled, token TIS at 2: 3.0 is truncated
        (OffPolicyConfig(tis_cap=2.0), True, [2.0, 0.5, 1.2, 1.0, 0.9], [1] * 5, [1, 0, 0, 0, 0]),
        # decoupled, no cap: raw weights
        (OffPolicyConfig(tis_cap=None), True, RATIOS, [1] * 5, [0] * 5),
        # decoupled, sequence-level weight: the products, 1.5 under a cap of 2, 1.08
        (OffPolicyConfig(is_level="sequence"), True, [1.5, 1.5, 1.08, 1.08, 1.08], [1] * 5, [0] * 5),
        # sequence-level weight truncated at 1.2
        (OffPolicyConfig(is_level="sequence", tis_cap=1.2), True, [1.2, 1.2, 1.08, 1.08, 1.08], [1] * 5,
         [1, 1, 0, 0, 0]),
        # product mask (0.5, 1.2): sequence 7 (1.5) out, sequence 9 (1.08) in; bypass applies no weight
        (OffPolicyConfig(seq_mask_product=(0.5, 1.2)), False, [0, 0, 1, 1, 1], [0, 0, 1, 1, 1], [0] * 5),
        # geometric-mean mask (0.9, 1.1): 1.2247 out, 1.0260 in; decoupled keeps the weights of kept tokens
        (OffPolicyConfig(seq_mask_geo_mean=(0.9, 1.1)), True, [0, 0, 1.2, 1.0, 0.9], [0, 0, 1, 1, 1], [1, 0, 0, 0, 0]),
        # geometric-mean mask (0.99, 1.01): both out
        (OffPolicyConfig(seq_mask_geo_mean=(0.99, 1.01)), False, [0] * 5, [0] * 5, [0] * 5),
        # both masks: product (0.5, 2) keeps both, geo (0.9, 1.1) drops sequence 7
        (
            OffPolicyConfig(seq_mask_product=(0.5, 2.0), seq_mask_geo_mean=(0.9, 1.1)),
            False,
            [0, 0, 1, 1, 1],
            [0, 0, 1, 1, 1],
            [0] * 5,
        ),
    ],
    ids=["bypass", "token-tis", "no-cap", "seq-is", "seq-is-capped", "product-mask", "geo-mask", "geo-tight", "both"],
)
def test_weights_and_masks_match_hand_computed_values(config, decoupled, factor, keep, truncated):
    corr = correction_T(PROXIMAL, BEHAVIOUR, config, decoupled=decoupled, sequence_ids_T=SEQ_IDS)
    np.testing.assert_allclose(corr.pg_factor_T.numpy(), factor, rtol=1e-9)
    assert corr.keep_T.tolist() == [bool(k) for k in keep]
    assert corr.truncated_T.tolist() == [bool(t) for t in truncated]


def test_sequence_level_settings_need_sequence_ids():
    with pytest.raises(ValueError, match="sequence_ids_T"):
        correction_T(PROXIMAL, BEHAVIOUR, OffPolicyConfig(seq_mask_product=(0.5, 2.0)), decoupled=False)


@pytest.mark.parametrize(
    "kwargs",
    [{"tis_cap": 0.0}, {"is_level": "row"}, {"seq_mask_product": (1.1, 2.0)}, {"seq_mask_geo_mean": (0.5, 0.9)}],
)
def test_invalid_settings_name_the_field(kwargs):
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        OffPolicyConfig(**kwargs)


def loss_batch(old_T: torch.Tensor) -> LossBatch:
    n = old_T.numel()
    return LossBatch(
        old_logprobs_T=old_T.float(),
        advantages_T=torch.tensor([1.0, -1.0, 0.5, -0.5, 2.0]),
        weights_T=torch.full((n,), 1.0 / n, dtype=torch.float64),
        token_share_T=torch.full((n,), 1.0 / n, dtype=torch.float64),
        sequence_ids_T=SEQ_IDS,
    )


def test_decoupled_loss_equals_standard_ppo_when_behaviour_is_proximal():
    current_T = (PROXIMAL + torch.tensor([0.3, -0.4, 0.05, 0.0, -0.25], dtype=torch.float64)).float()
    current_T.requires_grad_(True)
    standard = policy_loss(current_T, loss_batch(PROXIMAL), LossConfig())
    (standard_grad,) = torch.autograd.grad(standard.loss, current_T)
    decoupled_batch = replace(loss_batch(PROXIMAL), behaviour_logprobs_T=PROXIMAL.float())
    config = LossConfig(off_policy=OffPolicyConfig(recompute_behaviour=True, tis_cap=1.5))
    decoupled = policy_loss(current_T, decoupled_batch, config)
    (decoupled_grad,) = torch.autograd.grad(decoupled.loss, current_T)
    assert float(decoupled.loss.detach()) == pytest.approx(float(standard.loss.detach()), abs=1e-7)
    torch.testing.assert_close(decoupled_grad, standard_grad)
    assert decoupled.metrics["off_policy/is_weight_mean"] == pytest.approx(1.0)
    assert decoupled.metrics["off_policy/is_truncated_fraction"] == 0.0


def test_decoupled_loss_clips_around_proximal_and_weights_by_the_truncated_ratio():
    current_T = PROXIMAL.float().requires_grad_(True)  # the policy has not moved from the proximal one
    batch = replace(loss_batch(PROXIMAL), behaviour_logprobs_T=BEHAVIOUR.float())
    config = LossConfig(dual_clip_c=None, off_policy=OffPolicyConfig(recompute_behaviour=True, tis_cap=2.0))
    out = policy_loss(current_T, batch, config)
    # ratio pi / pi_prox = 1: each token's loss is -A, times min(pi_prox / pi_behav, 2), times its weight 1/5
    expected = sum(-a * min(r, 2.0) / 5 for a, r in zip([1.0, -1.0, 0.5, -0.5, 2.0], RATIOS, strict=True))
    assert float(out.loss.detach()) == pytest.approx(expected, rel=1e-6)
    assert out.metrics["loss/clip_fraction"] == 0.0
    assert out.metrics["off_policy/is_truncated_fraction"] == pytest.approx(0.2)
    assert out.metrics["off_policy/is_weight_mean"] == pytest.approx(sum(RATIOS) / 5)


def test_bypass_sequence_mask_drops_a_sequence_but_keeps_the_denominators():
    behaviour_T = BEHAVIOUR.float()
    current_T = PROXIMAL.float().requires_grad_(True)  # bypass: the mask compares the current policy with behaviour
    config = LossConfig(dual_clip_c=None, clip_high=10.0, clip_low=0.9,
                        off_policy=OffPolicyConfig(seq_mask_product=(0.5, 1.2)))
    out = policy_loss(current_T, loss_batch(behaviour_T), config)
    expected = sum(-a * r / 5 for a, r in zip([0.5, -0.5, 2.0], RATIOS[2:], strict=True))  # sequence 9 only, /5
    assert float(out.loss.detach()) == pytest.approx(expected, rel=1e-6)
    assert out.metrics["off_policy/masked_token_fraction"] == pytest.approx(0.4)


def test_recompute_without_behaviour_logprobs_is_refused():
    config = LossConfig(off_policy=OffPolicyConfig(recompute_behaviour=True))
    with pytest.raises(ValueError, match="behaviour_logprobs_T"):
        policy_loss(PROXIMAL.float(), loss_batch(PROXIMAL), config)


def test_metrics_of_a_known_perturbation_are_exact():
    behaviour_N = torch.tensor([-1.0, -2.0, -0.5, -3.0, -0.1, -1.5], dtype=torch.float64)
    delta_N = torch.tensor([0.1, -0.2, 0.05, 0.0, -0.3, 0.4], dtype=torch.float64)
    lag_N = torch.tensor([0, 0, 0, 0, 1, 2])
    metrics = finish(raw_terms(behaviour_N + delta_N, behaviour_N, lag_N))
    assert metrics["off_policy/lag0_tokens"] == 4
    assert metrics["off_policy/lag0_abs_diff_mean"] == pytest.approx(0.35 / 4, abs=1e-12)
    assert metrics["off_policy/lag0_abs_diff_max"] == pytest.approx(0.2, abs=1e-12)
    k3 = [math.exp(d) - d - 1 for d in (0.1, -0.2, 0.05, 0.0)]
    assert metrics["off_policy/lag0_k3"] == pytest.approx(sum(k3) / 4, rel=1e-9)
    ratios = [math.exp(d) for d in (0.1, -0.2, 0.05, 0.0)]
    assert metrics["off_policy/lag0_ratio_mean"] == pytest.approx(sum(ratios) / 4, rel=1e-9)
    assert metrics["off_policy/lag0_ratio_min"] == pytest.approx(math.exp(-0.2))
    assert metrics["off_policy/lag0_ratio_max"] == pytest.approx(math.exp(0.1))
    assert metrics["off_policy/lag1_ratio_mean"] == pytest.approx(math.exp(-0.3))
    assert metrics["off_policy/lag2_tokens"] == 1 and metrics["off_policy/lag2_abs_diff_max"] == pytest.approx(0.4)
    assert not any(key.startswith("off_policy/lag3") for key in metrics)


def test_micro_batches_merge_into_the_whole_batch_statistics():
    generator = torch.Generator().manual_seed(0)
    behaviour_N = -torch.rand(40, generator=generator, dtype=torch.float64)
    trainer_N = behaviour_N + 0.1 * torch.randn(40, generator=generator, dtype=torch.float64)
    lag_N = torch.randint(0, 3, (40,), generator=generator)
    whole = finish(raw_terms(trainer_N, behaviour_N, lag_N))
    parts = [raw_terms(trainer_N[i : i + 7], behaviour_N[i : i + 7], lag_N[i : i + 7]) for i in range(0, 40, 7)]
    merged = finish(merge_raw(parts))
    assert merged.keys() == whole.keys()
    for key, value in whole.items():
        assert merged[key] == pytest.approx(value, rel=1e-12), key


def test_meter_groups_tokens_by_lag_behind_the_trainer_version():
    meter = OffPolicyMeter(trainer_version=5)
    versions_N = torch.tensor([5, 5, 4, 3, 3])
    meter.add(BEHAVIOUR + 0.1, BEHAVIOUR, versions_N)
    metrics = meter.metrics(trainable_tokens=10)
    assert [metrics[f"off_policy/lag{k}_tokens"] for k in (0, 1, 2)] == [2, 1, 2]
    assert metrics["off_policy/measured_token_fraction"] == 0.5
    with pytest.raises(ValueError, match="ahead of the trainer"):
        OffPolicyMeter(trainer_version=2).add(BEHAVIOUR, BEHAVIOUR, versions_N)
    assert OffPolicyMeter(0).metrics(10) == {}


def test_target_layout_lists_trainable_tokens_in_order():
    class Seq:
        def __init__(self, mask, versions):
            self.loss_mask_T, self.policy_versions_T = np.array(mask, bool), np.array(versions)

    versions_N, ids_N = target_layout([Seq([0, 1, 1, 0, 1], [-1, 3, 3, -1, 4]), Seq([0, 0, 1], [-1, -1, 2])])
    assert versions_N.tolist() == [3, 3, 4, 2] and ids_N.tolist() == [0, 0, 0, 1]


def test_every_bucket_reports_the_same_keys_and_large_lags_share_the_last():
    from trainer.off_policy_metrics import LAG_BUCKETS

    behaviour_N = torch.tensor([-1.0, -2.0, -0.5])
    raw = raw_terms(behaviour_N + 0.1, behaviour_N, torch.tensor([0, LAG_BUCKETS - 1, LAG_BUCKETS + 5]),
                    every_bucket=True)
    assert len(raw) == LAG_BUCKETS * 7
    metrics = finish(merge_raw([raw, raw_terms(behaviour_N, behaviour_N, torch.tensor([1, 1, 1]), every_bucket=True)]))
    assert metrics[f"off_policy/lag{LAG_BUCKETS - 1}_tokens"] == 2 and metrics["off_policy/lag1_tokens"] == 3
    assert metrics["off_policy/lag1_abs_diff_max"] == 0.0 and "off_policy/lag2_tokens" not in metrics
