"""Off-policy correction in the verl loss (skipped without verl): our weights and masks against verl 0.9.1's rollout
correction, verl's rollout_is_weights beside our token weights, and the off_policy metrics through actor_loss."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from tests.trainer.verl_support import require_verl

require_verl("verl")
require_verl("tensordict")

from verl.trainer.ppo.core_algos import get_policy_loss_fn  # noqa: E402
from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_and_rejection_mask  # noqa: E402
from verl.utils import tensordict_utils as tu  # noqa: E402

from tests.trainer.test_verl_loss import (  # noqa: E402
    current_logprobs,
    model_output_for,
    reference_loss,
    rows_for,
    samples_and_advantages,
)
from trainer.backends.verl import build_training_input  # noqa: E402
from trainer.backends.verl_loss import (  # noqa: E402
    TRAINER_VERSION_KEY,
    VerlLossSettings,
    actor_loss,
    weighted_ppo_policy_loss,
)
from trainer.losses import LossConfig  # noqa: E402
from trainer.off_policy import OffPolicyConfig, correction_T  # noqa: E402
from trainer.off_policy_metrics import LAG_BUCKETS, finish, merge_raw  # noqa: E402


def random_logprobs(seed: int, shape=(5, 9), spread: float = 0.3):
    generator = torch.Generator().manual_seed(seed)
    behaviour = -torch.rand(shape, generator=generator, dtype=torch.float64) * 2
    proximal = behaviour + torch.randn(shape, generator=generator, dtype=torch.float64) * spread
    mask = torch.rand(shape, generator=generator) > 0.25
    mask[:, 0] = True
    return proximal, behaviour, mask


def ours_padded(proximal, behaviour, mask, config, decoupled=True):
    rows = torch.arange(mask.shape[0])[:, None].expand_as(mask)
    corr = correction_T(proximal[mask], behaviour[mask], config, decoupled=decoupled, sequence_ids_T=rows[mask])
    return corr


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize(("level", "cap"), [("token", 2.0), ("token", 1.1), ("sequence", 2.0)])
def test_truncated_weights_equal_verls_rollout_correction(seed, level, cap):
    proximal, behaviour, mask = random_logprobs(seed)
    verl_weights, _, _ = compute_rollout_correction_and_rejection_mask(
        proximal, behaviour, mask.double(), rollout_is=level, rollout_is_threshold=cap
    )
    corr = ours_padded(proximal, behaviour, mask, OffPolicyConfig(tis_cap=cap, is_level=level))
    torch.testing.assert_close(corr.pg_factor_T, verl_weights.batch["rollout_is_weights"][mask])


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize(
    ("ours", "verls", "threshold"),
    [
        ({"seq_mask_product": (1 / 1.5, 1.5)}, "seq_sum_k1", "0.6666666666666666_1.5"),
        ({"seq_mask_geo_mean": (1 / 1.05, 1.05)}, "seq_mean_k1", "0.9523809523809523_1.05"),
    ],
)
def test_sequence_masks_equal_verls_rejection_sampling(seed, ours, verls, threshold):
    proximal, behaviour, mask = random_logprobs(seed, spread=0.15)
    _, verl_mask, _ = compute_rollout_correction_and_rejection_mask(
        proximal, behaviour, mask.double(), rollout_rs=verls, rollout_rs_threshold=threshold
    )
    corr = ours_padded(proximal, behaviour, mask, OffPolicyConfig(**ours), decoupled=False)
    kept = verl_mask[mask].bool()
    assert kept.any() and not kept.all()  # the bounds keep some sequences and drop others
    assert corr.keep_T.tolist() == kept.tolist()


def test_decoupled_loss_equals_verls_decoupled_correction(seed=4):
    """verl's decoupled mode: PPO around old (= proximal) times its TIS weights; ours: behaviour in the settings."""
    from omegaconf import OmegaConf

    proximal, behaviour, mask = random_logprobs(seed)
    generator = torch.Generator().manual_seed(seed)
    current = (proximal + torch.randn(proximal.shape, generator=generator, dtype=torch.float64) * 0.2).float()
    current.requires_grad_(True)
    advantages = torch.randn(proximal.shape[0], 1, generator=generator).expand(proximal.shape)
    tokens = int(mask.sum())
    verl_config = OmegaConf.create(
        {"clip_ratio": 0.2, "clip_ratio_low": 0.2, "clip_ratio_high": 0.2, "clip_ratio_c": 3.0,
         "global_batch_info": {"dp_size": 1, "batch_num_tokens": tokens}}
    )
    weights, _, _ = compute_rollout_correction_and_rejection_mask(
        proximal, behaviour, mask.double(), rollout_is="token", rollout_is_threshold=1.2
    )
    expected, _ = get_policy_loss_fn("vanilla")(
        proximal.float(), current, advantages, mask.float(), "token-mean", verl_config,
        weights.batch["rollout_is_weights"].float(),
    )
    (expected_grad,) = torch.autograd.grad(expected, current)
    settings = VerlLossSettings(
        LossConfig(off_policy=OffPolicyConfig(recompute_behaviour=True, tis_cap=1.2)),
        batch_num_tokens=tokens, token_weights=mask.double() / tokens, behaviour_log_prob=behaviour,
    )
    ours, metrics = weighted_ppo_policy_loss(proximal.float(), current, advantages, mask, "token-sum", settings)
    (grad,) = torch.autograd.grad(ours, current)
    assert float(ours.detach()) == pytest.approx(float(expected.detach()), rel=1e-5, abs=1e-7)
    torch.testing.assert_close(grad, expected_grad, rtol=1e-5, atol=1e-7)
    assert 0 < metrics["off_policy/is_truncated_fraction"] < 1


def training_data(seed: int, trainer_version: int | None):
    samples, advantages = samples_and_advantages()
    rows = rows_for(samples, advantages, dp_size=1)
    data = build_training_input(rows, calculate_entropy=False)
    tu.assign_non_tensor(data, dp_size=1, batch_num_tokens=rows.trainable_tokens)
    if trainer_version is not None:
        tu.assign_non_tensor(data, **{TRAINER_VERSION_KEY: trainer_version})
    logprobs_S = current_logprobs(samples, seed=seed)
    return samples, advantages, rows, data, logprobs_S


def test_verls_rollout_is_weights_multiply_our_token_weights():
    samples, advantages, rows, data, logprobs_S = training_data(6, None)
    config = LossConfig()
    output, _ = model_output_for(rows, data, logprobs_S)
    plain, _ = actor_loss(output, data, config=config)
    data["rollout_is_weights"] = torch.full(tuple(data["response_mask"].shape), 0.5)
    halved, _ = actor_loss(output, data, config=config)
    assert float(halved.detach()) == pytest.approx(0.5 * float(plain.detach()), rel=1e-6)
    expected = reference_loss(samples, advantages, logprobs_S, config)
    assert float(plain.detach()) == pytest.approx(float(expected.loss), rel=1e-5, abs=1e-7)


def test_actor_loss_reports_every_lag_bucket_and_the_exact_mismatch():
    samples, _, rows, data, _ = training_data(7, trainer_version=2)
    deltas_S = [torch.linspace(-0.3, 0.3, s.num_tokens) for s in samples]
    recorded_S = [torch.from_numpy(np.asarray(s.logprobs_T, dtype=np.float32)) for s in samples]
    trainer_S = [r + d for r, d in zip(recorded_S, deltas_S, strict=True)]
    output, _ = model_output_for(rows, data, trainer_S)
    _, reported = actor_loss(output, data, config=LossConfig())
    raw = {key: metric.aggregate() for key, metric in reported.items() if key.startswith("off_policy/lag")}
    assert {key for key in raw if key.endswith("_tokens")} == {f"off_policy/lag{k}_tokens" for k in range(LAG_BUCKETS)}
    metrics = finish(merge_raw([raw]))
    lags, diffs = [], []
    for sample, delta in zip(samples, deltas_S, strict=True):
        mask = np.asarray(sample.loss_mask_T, dtype=bool)
        lags += (2 - np.asarray(sample.policy_versions_T)[mask]).tolist()
        diffs += delta.numpy()[mask].tolist()
    lags, diffs = np.array(lags), np.abs(np.array(diffs))
    for lag in (0, 1):
        assert metrics[f"off_policy/lag{lag}_tokens"] == int((lags == lag).sum())
        assert metrics[f"off_policy/lag{lag}_abs_diff_mean"] == pytest.approx(diffs[lags == lag].mean(), abs=1e-6)
        assert metrics[f"off_policy/lag{lag}_abs_diff_max"] == pytest.approx(diffs[lags == lag].max(), abs=1e-6)
    assert "off_policy/lag2_tokens" not in metrics and not math.isnan(metrics["off_policy/lag0_k3"])
