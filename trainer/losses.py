"""PPO-clip policy loss with KL and entropy terms, aggregated with global denominators (pure torch).

Every aggregation mode gives each trainable token of a sequence one constant weight computed from
counts over the whole optimizer update (`LossDenominators`): the loss of a micro-batch is the
weighted sum of its tokens' losses, so the micro-batch losses (and their gradients) of all workers
add up exactly to the full-batch loss, however the update is split. Modes:

- token-mean: 1 / trainable tokens in the update.
- seq-mean-token-sum: 1 / sequences.
- seq-mean-token-mean: 1 / (the sequence's trainable tokens x sequences).
- rollout-token-mean (default): 1 / (the rollout's trainable tokens over all its samples x rollouts):
  the token mean within each rollout, then the mean over rollouts, whatever number of samples a
  rollout produced.

Sequences and rollouts without trainable tokens are not counted. `LossConfig.off_policy` adds the off-policy
correction of `trainer.off_policy` (decoupled PPO's truncated importance weight, sequence masks) as extra factors
on the token weights; masked tokens stay in the denominators. All per-token tensors share one
layout (packed 1-D or padded 2-D) and are aligned with token positions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

import numpy as np
import torch

from trainer.off_policy import OffPolicyConfig, correction_T

AggMode = Literal["token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "rollout-token-mean"]
"""How token losses are averaged into one number."""

AGG_MODES: tuple[AggMode, ...] = (
    "token-mean",
    "seq-mean-token-sum",
    "seq-mean-token-mean",
    "rollout-token-mean",
)
"""Every aggregation mode."""

KlEstimator = Literal["k1", "k2", "k3"]
"""KL(policy || reference) estimators: k1 log-ratio, k2 half squared log-ratio, k3 verl's low_var_kl."""


@dataclass(frozen=True)
class LossConfig:
    """Policy-loss hyperparameters."""

    clip_low: float = 0.2
    """Ratio lower clip: 1 - clip_low."""
    clip_high: float = 0.2
    """Ratio upper clip: 1 + clip_high (asymmetric "clip-higher" when above clip_low)."""
    dual_clip_c: float | None = 3.0
    """Dual-clip bound for negative advantages (loss at most -A * c); None disables it."""
    agg_mode: AggMode = "rollout-token-mean"
    """Aggregation mode, see the module docstring."""
    kl_coef: float = 0.0
    """Weight of the KL penalty to the reference policy (0: no reference needed)."""
    kl_estimator: KlEstimator = "k3"
    """Which KL estimator."""
    entropy_coef: float = 0.0
    """Weight of the entropy bonus (subtracted from the loss)."""
    log_ratio_limit: float = 20.0
    """Clamp on |log ratio| before exponentiating, for stability (verl uses 20)."""
    off_policy: OffPolicyConfig = OffPolicyConfig()
    """Decoupled PPO (recompute_behaviour), truncated importance weights and sequence masks (trainer.off_policy)."""

    def __post_init__(self) -> None:
        if not 0.0 <= self.clip_low < 1.0 or self.clip_high < 0.0:
            raise ValueError(
                f"LossConfig clip_low={self.clip_low}, clip_high={self.clip_high}: use "
                "0 <= clip_low < 1 and clip_high >= 0"
            )
        if self.dual_clip_c is not None and self.dual_clip_c <= 1.0:
            raise ValueError(f"LossConfig.dual_clip_c={self.dual_clip_c}: use a value above 1, or None")
        if self.agg_mode not in AGG_MODES:
            raise ValueError(f"LossConfig.agg_mode={self.agg_mode!r}: use one of {AGG_MODES}")
        if self.kl_estimator not in ("k1", "k2", "k3"):
            raise ValueError(f"LossConfig.kl_estimator={self.kl_estimator!r}: use 'k1', 'k2' or 'k3'")


@dataclass(frozen=True)
class LossDenominators:
    """Counts over one whole optimizer update (all micro-batches on all workers)."""

    tokens: int
    """Trainable tokens."""
    sequences: int
    """Sequences with at least one trainable token."""
    tokens_by_rollout: Mapping[str, int]
    """Trainable tokens of each rollout, over all its sequences."""

    @property
    def rollouts(self) -> int:
        """Rollouts with at least one trainable token."""
        return len(self.tokens_by_rollout)

    @classmethod
    def from_sequences(cls, rollout_ids: Sequence[str], trainable_tokens: Sequence[int]) -> LossDenominators:
        """Counts from every sequence of the update: its rollout and its number of trainable tokens."""
        by_rollout: dict[str, int] = {}
        for rollout_id, count in zip(rollout_ids, trainable_tokens, strict=True):
            if count > 0:
                by_rollout[rollout_id] = by_rollout.get(rollout_id, 0) + int(count)
        return cls(sum(by_rollout.values()), sum(1 for n in trainable_tokens if n > 0), by_rollout)

    def token_weight(self, mode: AggMode, rollout_id: str, trainable_tokens: int) -> float:
        """The loss weight of each trainable token of one sequence under `mode`."""
        if trainable_tokens <= 0:
            return 0.0
        if mode == "token-mean":
            return 1.0 / self.tokens
        if mode == "seq-mean-token-sum":
            return 1.0 / self.sequences
        if mode == "seq-mean-token-mean":
            return 1.0 / (trainable_tokens * self.sequences)
        if mode == "rollout-token-mean":
            if rollout_id not in self.tokens_by_rollout:
                raise ValueError(
                    f"rollout {rollout_id!r} is not in these LossDenominators; build them "
                    "from every sequence of the update"
                )
            return 1.0 / (self.tokens_by_rollout[rollout_id] * self.rollouts)
        raise ValueError(f"agg mode {mode!r}: use one of {AGG_MODES}")


class LossSequence(Protocol):
    """What the loss needs from a sequence (a `trainer.samples.Sample` is one)."""

    @property
    def rollout_id(self) -> str: ...

    @property
    def loss_mask_T(self) -> np.ndarray: ...

    @property
    def logprobs_T(self) -> np.ndarray: ...


@dataclass(frozen=True)
class LossBatch:
    """Per-token inputs of one micro-batch, all in one layout."""

    old_logprobs_T: torch.Tensor
    """Logprobs the ratio is taken against: the rollout's (recorded by the gateway) or recomputed."""
    advantages_T: torch.Tensor
    """Advantage of each token (its sequence's advantage)."""
    weights_T: torch.Tensor
    """Loss weight of each token from the update's denominators; 0 on untrainable tokens."""
    token_share_T: torch.Tensor
    """1 / the update's trainable tokens on trainable tokens, 0 elsewhere (for token-mean metrics)."""
    ref_logprobs_T: torch.Tensor | None = None
    """Reference-policy logprobs, needed when kl_coef > 0."""
    behaviour_logprobs_T: torch.Tensor | None = None
    """Decoupled PPO: the engine's recorded logprobs, while old_logprobs_T holds the trainer's recomputation."""
    sequence_ids_T: torch.Tensor | None = None
    """Each token's sequence (any ints), for sequence-level importance weights and masks."""
    policy_versions_T: torch.Tensor | None = None
    """Policy version that sampled each token (for the off-policy metrics by lag)."""

    @classmethod
    def pack(
        cls,
        sequences: Sequence[LossSequence],
        advantages_S: Sequence[float],
        denominators: LossDenominators,
        mode: AggMode,
    ) -> LossBatch:
        """Concatenate sequences into a packed 1-D micro-batch, using the rollout logprobs as old logprobs."""
        masks = [np.asarray(seq.loss_mask_T, dtype=bool) for seq in sequences]
        weights = [
            np.where(mask, denominators.token_weight(mode, seq.rollout_id, int(mask.sum())), 0.0)
            for seq, mask in zip(sequences, masks, strict=True)
        ]
        mask_T = np.concatenate(masks) if masks else np.zeros(0, dtype=bool)
        advantages = [np.full(mask.shape[0], a) for mask, a in zip(masks, advantages_S, strict=True)]
        return cls(
            old_logprobs_T=torch.from_numpy(
                np.concatenate([seq.logprobs_T for seq in sequences] or [np.zeros(0)]).astype(np.float32)
            ),
            advantages_T=torch.from_numpy(np.concatenate(advantages or [np.zeros(0)]).astype(np.float32)),
            weights_T=torch.from_numpy(np.concatenate(weights or [np.zeros(0)])),
            token_share_T=torch.from_numpy(mask_T / max(denominators.tokens, 1)),
        )


@dataclass(frozen=True)
class PpoTerms:
    """Per-token PPO-clip results."""

    loss_T: torch.Tensor
    """Clipped (and dual-clipped) surrogate loss per token."""
    clipped_T: torch.Tensor
    """True where the clipped term was the larger (verl's clipfrac convention)."""
    dual_clipped_T: torch.Tensor
    """True where the dual clip bounded a negative-advantage token."""
    log_ratio_T: torch.Tensor
    """Clamped log(pi / pi_old)."""


def ppo_clip_T(
    logprobs_T: torch.Tensor,
    old_logprobs_T: torch.Tensor,
    advantages_T: torch.Tensor,
    *,
    clip_low: float,
    clip_high: float,
    dual_clip_c: float | None,
    log_ratio_limit: float = 20.0,
) -> PpoTerms:
    """PPO clipped surrogate per token, with asymmetric clip and optional dual clip (verl's conventions)."""
    log_ratio_T = torch.clamp(logprobs_T - old_logprobs_T, -log_ratio_limit, log_ratio_limit)
    ratio_T = torch.exp(log_ratio_T)
    unclipped_T = -advantages_T * ratio_T
    clipped_loss_T = -advantages_T * torch.clamp(ratio_T, 1.0 - clip_low, 1.0 + clip_high)
    loss_T = torch.maximum(unclipped_T, clipped_loss_T)
    clipped_T = clipped_loss_T > unclipped_T
    dual_clipped_T = torch.zeros_like(clipped_T)
    if dual_clip_c is not None:
        bound_T = -advantages_T * dual_clip_c
        negative_T = advantages_T < 0
        dual_clipped_T = negative_T & (loss_T > bound_T)
        loss_T = torch.where(negative_T, torch.minimum(loss_T, bound_T), loss_T)
    return PpoTerms(loss_T, clipped_T, dual_clipped_T, log_ratio_T)


def kl_penalty_T(
    logprobs_T: torch.Tensor, ref_logprobs_T: torch.Tensor, estimator: KlEstimator
) -> torch.Tensor:
    """Per-token estimate of KL(policy || reference) from sampled-token logprobs."""
    log_ratio_T = logprobs_T - ref_logprobs_T
    if estimator == "k1":
        return log_ratio_T
    if estimator == "k2":
        return 0.5 * log_ratio_T.square()
    if estimator == "k3":
        reverse_T = torch.clamp(-log_ratio_T, -20.0, 20.0)
        return torch.clamp(torch.exp(reverse_T) - reverse_T - 1.0, -10.0, 10.0)
    raise ValueError(f"kl estimator {estimator!r}: use 'k1', 'k2' or 'k3'")


@dataclass(frozen=True)
class LossOutput:
    """A micro-batch's loss and metrics; both are its additive share of the update's values."""

    loss: torch.Tensor
    """Scalar to backpropagate; summing it over micro-batches gives the full-batch loss."""
    metrics: Mapping[str, float]
    """pg, kl, entropy, clip fractions and approximate KLs; sum them over micro-batches."""


def policy_loss(
    logprobs_T: torch.Tensor, batch: LossBatch, config: LossConfig, entropy_T: torch.Tensor | None = None
) -> LossOutput:
    """PPO-clip loss + kl_coef * KL - entropy_coef * entropy, weighted with the update's denominators."""
    terms = ppo_clip_T(
        logprobs_T,
        batch.old_logprobs_T,
        batch.advantages_T,
        clip_low=config.clip_low,
        clip_high=config.clip_high,
        dual_clip_c=config.dual_clip_c,
        log_ratio_limit=config.log_ratio_limit,
    )
    weights_T = batch.weights_T.to(device=logprobs_T.device, dtype=logprobs_T.dtype)
    share_T = batch.token_share_T.to(device=logprobs_T.device, dtype=logprobs_T.dtype)
    pg_weights_T, weights_T, metrics = _off_policy_weights(logprobs_T, batch, config.off_policy, weights_T, share_T)
    pg = (terms.loss_T * pg_weights_T).sum()
    loss = pg
    metrics["loss/pg"] = float(pg.detach())
    if config.kl_coef:
        if batch.ref_logprobs_T is None:
            raise ValueError(
                f"kl_coef={config.kl_coef} needs LossBatch.ref_logprobs_T; compute the "
                "reference policy's logprobs or set kl_coef=0"
            )
        kl = (kl_penalty_T(logprobs_T, batch.ref_logprobs_T, config.kl_estimator) * weights_T).sum()
        loss = loss + config.kl_coef * kl
        metrics["loss/kl"] = float(kl.detach())
    if entropy_T is not None:
        entropy = (entropy_T * weights_T).sum()
        loss = loss - config.entropy_coef * entropy
        metrics["loss/entropy"] = float(entropy.detach())
    with torch.no_grad():
        log_ratio_T = terms.log_ratio_T
        metrics["loss/clip_fraction"] = float((terms.clipped_T * share_T).sum())
        metrics["loss/dual_clip_fraction"] = float((terms.dual_clipped_T * share_T).sum())
        metrics["loss/ppo_kl"] = float((-log_ratio_T * share_T).sum())
        # k3 of KL(pi_old || pi): tokens were sampled from pi_old, so r = pi / pi_old (verl's k3_kl convention);
        # expm1(x) - x, not exp(x) - 1 - x: in float32 the latter rounds away x^2/2 at log-ratios near 0 (lag 0)
        k3_T = (torch.expm1(log_ratio_T) - log_ratio_T).clamp_min(0.0)
        metrics["loss/approx_kl_k3"] = float((k3_T * share_T).sum())
    metrics["loss/total"] = float(loss.detach())
    return LossOutput(loss, metrics)


def _off_policy_weights(
    logprobs_T: torch.Tensor,
    batch: LossBatch,
    config: OffPolicyConfig,
    weights_T: torch.Tensor,
    share_T: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, dict[str, float]]:
    """Token weights of the pg term and of the KL/entropy terms after the off-policy correction, and its metrics."""
    decoupled = batch.behaviour_logprobs_T is not None
    if config.recompute_behaviour and not decoupled:
        raise ValueError(
            "LossConfig.off_policy.recompute_behaviour is set but the batch has no behaviour_logprobs_T; the backend "
            "must recompute the proximal logprobs into old_logprobs_T and pass the recorded ones as behaviour"
        )
    if not decoupled and not config.masks_sequences:
        return weights_T, weights_T, {}
    proximal_T = batch.old_logprobs_T if decoupled else logprobs_T.detach()
    behaviour_T = batch.behaviour_logprobs_T if batch.behaviour_logprobs_T is not None else batch.old_logprobs_T
    sequence_ids_T = batch.sequence_ids_T.to(logprobs_T.device) if batch.sequence_ids_T is not None else None
    corr = correction_T(
        proximal_T.to(logprobs_T.device), behaviour_T.to(logprobs_T.device), config, decoupled=decoupled,
        sequence_ids_T=sequence_ids_T,
    )
    metrics = {
        "off_policy/masked_token_fraction": float(((~corr.keep_T) * share_T).sum()),
    }
    if decoupled:
        metrics["off_policy/is_weight_mean"] = float((corr.weight_T * share_T).sum())
        metrics["off_policy/is_truncated_fraction"] = float((corr.truncated_T * share_T).sum())
    return weights_T * corr.pg_factor_T, weights_T * corr.keep_T, metrics


def agg_loss(
    loss_mat: torch.Tensor, mask: torch.Tensor, mode: AggMode, rollout_ids: Sequence[str] | None = None
) -> torch.Tensor:
    """Aggregate a [sequences, tokens] loss matrix over one whole batch (verl's agg_loss, plus rollouts).

    `rollout_ids` names each row's rollout (default: every row its own rollout).
    """
    rows = [str(i) for i in range(loss_mat.shape[0])] if rollout_ids is None else list(rollout_ids)
    counts = [int(n) for n in mask.sum(dim=-1).tolist()]
    denominators = LossDenominators.from_sequences(rows, counts)
    row_weights = torch.tensor(
        [denominators.token_weight(mode, rid, n) for rid, n in zip(rows, counts, strict=True)],
        dtype=loss_mat.dtype,
        device=loss_mat.device,
    )
    return (loss_mat * mask.to(loss_mat.dtype) * row_weights[:, None]).sum()
