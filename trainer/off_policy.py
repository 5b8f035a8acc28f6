"""Off-policy correction of the PPO loss: decoupled PPO, truncated importance sampling, sequence masks (pure torch).

Three policies can be involved in a token's loss: the behaviour policy that sampled it (the engine's recorded
logprob), the proximal policy the PPO ratio is clipped around, and the policy being trained.

- Bypass (the default, `recompute_behaviour: false`): the proximal policy is the behaviour policy, so the PPO ratio
  pi / pi_behav already carries the importance weight and no extra weight is applied (verl's bypass mode with
  `loss_type: ppo_clip`). Staleness (policy lag) and engine-trainer numeric mismatch both sit inside that ratio.
- Decoupled (`recompute_behaviour: true`, AReaL's decoupled PPO, verl's decoupled rollout correction): before the
  update, a no-grad forward with the current weights gives the proximal logprobs; the PPO ratio is pi / pi_prox
  and each token's loss is multiplied by the importance weight pi_prox / pi_behav, truncated at `tis_cap`
  (verl's TIS; AReaL drops tokens above its cap instead of truncating them). The weight is per token
  (`is_level: token`) or the product over the sequence's trainable tokens (`is_level: sequence`). Both backends
  recompute every update's proximal logprobs at the step's starting weights, before its first optimizer update: the
  torch backend with a no-grad pass over its micro-batches, the verl backend with its workers' forward-only pass
  (`TrainingWorker.infer_batch`, the recomputation as `old_log_probs`, the recorded logprobs as `rollout_log_probs`).
- Sequence masks (both modes, verl's rejection sampling `seq_sum_k1` / `seq_mean_k1`): a sequence whose ratio
  product (or geometric mean) of pi_prox / pi_behav lies outside its bounds is left out of the loss. In bypass mode
  the proximal logprobs are the current ones (detached), as verl's bypass mode computes them. verl states its k1
  bounds on pi_behav / pi_prox; ours are on pi_prox / pi_behav (the importance-weight direction).

Why bypass is the default: the recomputation costs one more (no-grad) forward pass over the batch per step
(measured on the tiny model, 8 samples of 192 tokens, a shared 2-core machine: 47-54 s against 31-42 s a step),
and on the CPU path engine and trainer run the same fp32 torch model (a 2-iteration train-if run on the tiny model
with the embedded engine: lag-0 |logprob difference| mean 1e-6, max 2e-6; at lag 1 after an lr 1e-3 update: mean 0.12,
max 0.42, ratios 0.66-1.41); staleness is bounded by
`rollout.max_version_lag` and PPO's clip already bounds a stale ratio. Read `off_policy/lag0_k3` and
`off_policy/lag0_abs_diff_*` (`trainer.off_policy_metrics`, logged every step at no extra cost): when the lag-0
mismatch is not negligible (bf16 inference on GPUs) or lags are deep, turn `recompute_behaviour` on, or mask
sequences with `seq_mask_geo_mean`.

Masked and truncated tokens keep their place in the loss denominators: masking a sequence removes its gradient
without enlarging everyone else's step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

LOG_RATIO_LIMIT = 20.0
"""Clamp on |log ratio| before exponentiating (verl's SAFETY_BOUND)."""

IsLevel = Literal["token", "sequence"]
"""Importance weight per token, or one weight per sequence (the product of its tokens' ratios)."""


def _check_bounds(name: str, bounds: tuple[float, float] | None) -> None:
    if bounds is not None and not 0.0 < bounds[0] <= 1.0 <= bounds[1]:
        raise ValueError(f"OffPolicyConfig.{name}={bounds}: use (low, high) with 0 < low <= 1 <= high, or None")


@dataclass(frozen=True)
class OffPolicyConfig:
    """How the loss corrects for tokens sampled by another policy than the one trained (see trainer.off_policy)."""

    recompute_behaviour: bool = False
    """Decoupled PPO: recompute every token's logprob with the trainer's current weights before the update (one extra
    no-grad forward pass per step) and clip the PPO ratio around it, weighting each token by the truncated
    pi_prox / pi_behav. Off: the ratio is taken against the engine's recorded logprobs (no extra pass)."""
    tis_cap: float | None = 2.0
    """Decoupled mode: truncate the importance weight pi_prox / pi_behav at this value (verl's rollout_is_threshold);
    None: no truncation."""
    is_level: IsLevel = "token"
    """Decoupled mode: one importance weight per token, or per sequence (the product of its tokens' ratios)."""
    seq_mask_product: tuple[float, float] | None = None
    """Leave out sequences whose product of pi_prox / pi_behav over their trainable tokens lies outside (low, high)
    (verl's seq_sum_k1 rejection); None: no such mask."""
    seq_mask_geo_mean: tuple[float, float] | None = None
    """Leave out sequences whose geometric mean of pi_prox / pi_behav lies outside (low, high) (verl's seq_mean_k1
    rejection, e.g. (0.999, 1.001)); None: no such mask."""

    def __post_init__(self) -> None:
        if self.tis_cap is not None and self.tis_cap <= 0:
            raise ValueError(f"OffPolicyConfig.tis_cap={self.tis_cap}: use a positive cap (2.0 is verl's) or None")
        if self.is_level not in ("token", "sequence"):
            raise ValueError(f"OffPolicyConfig.is_level={self.is_level!r}: use 'token' or 'sequence'")
        _check_bounds("seq_mask_product", self.seq_mask_product)
        _check_bounds("seq_mask_geo_mean", self.seq_mask_geo_mean)

    @property
    def masks_sequences(self) -> bool:
        """Whether any sequence mask is configured."""
        return self.seq_mask_product is not None or self.seq_mask_geo_mean is not None


@dataclass(frozen=True)
class Correction:
    """Per-token factors of the off-policy correction."""

    pg_factor_T: torch.Tensor
    """Multiplier of each token's policy-gradient loss: the truncated importance weight (1 in bypass mode), 0 where
    masked."""
    keep_T: torch.Tensor
    """False on tokens of masked sequences (they also leave the KL and entropy terms)."""
    weight_T: torch.Tensor
    """The importance weight before truncation (1 in bypass mode)."""
    truncated_T: torch.Tensor
    """True where the weight was truncated at tis_cap."""


def sequence_sums(values_T: torch.Tensor, sequence_ids_T: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token sum of `values_T` over its sequence and its sequence's token count (`sequence_ids_T`: any ints)."""
    _, inverse_T = torch.unique(sequence_ids_T, return_inverse=True)
    count = int(inverse_T.max()) + 1 if inverse_T.numel() else 0
    sums = torch.zeros(count, dtype=values_T.dtype, device=values_T.device).index_add_(0, inverse_T, values_T)
    counts = torch.zeros(count, dtype=values_T.dtype, device=values_T.device).index_add_(
        0, inverse_T, torch.ones_like(values_T)
    )
    return sums[inverse_T], counts[inverse_T]


def correction_T(
    proximal_T: torch.Tensor,
    behaviour_T: torch.Tensor,
    config: OffPolicyConfig,
    *,
    decoupled: bool,
    sequence_ids_T: torch.Tensor | None = None,
) -> Correction:
    """The correction of tokens with proximal and behaviour logprobs (trainable tokens only, any 1-D layout).

    `decoupled`: apply the importance weight (the PPO ratio is around the proximal policy); otherwise only masks.
    `sequence_ids_T` names each token's sequence; needed for sequence-level weights and masks.
    """
    with torch.no_grad():
        log_ratio_T = (proximal_T - behaviour_T).double()
        needs_sequences = config.masks_sequences or (decoupled and config.is_level == "sequence")
        if needs_sequences and sequence_ids_T is None:
            raise ValueError(
                "sequence-level importance weights or masks need each token's sequence id; pass sequence_ids_T "
                "(trainer.off_policy_metrics.target_layout builds it), or use is_level='token' and no seq_mask_*"
            )
        seq_sum_T, seq_count_T = (
            sequence_sums(log_ratio_T, sequence_ids_T.to(log_ratio_T.device))
            if needs_sequences and sequence_ids_T is not None
            else (log_ratio_T, torch.ones_like(log_ratio_T))
        )
        keep_T = torch.ones_like(log_ratio_T, dtype=torch.bool)
        for bounds, stat_T in (
            (config.seq_mask_product, seq_sum_T),
            (config.seq_mask_geo_mean, seq_sum_T / seq_count_T.clamp_min(1.0)),
        ):
            if bounds is not None:
                ratio_T = torch.exp(stat_T.clamp(-LOG_RATIO_LIMIT, LOG_RATIO_LIMIT))
                keep_T &= (ratio_T >= bounds[0]) & (ratio_T <= bounds[1])
        if decoupled:
            level_T = log_ratio_T if config.is_level == "token" else seq_sum_T
            weight_T = torch.exp(level_T.clamp(-LOG_RATIO_LIMIT, LOG_RATIO_LIMIT))
        else:
            weight_T = torch.ones_like(log_ratio_T)
        cap = config.tis_cap if decoupled and config.tis_cap is not None else float("inf")
        truncated_T = weight_T > cap
        factor_T = torch.where(keep_T, weight_T.clamp(max=cap), torch.zeros_like(weight_T))
        dtype = proximal_T.dtype
        return Correction(factor_T.to(dtype), keep_T, weight_T.to(dtype), truncated_T)
