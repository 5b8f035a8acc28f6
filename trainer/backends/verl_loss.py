"""Our weighted PPO loss inside verl: a policy loss in verl's registry and the actor loss its workers call.

verl's policy losses share one signature (old_log_prob, log_prob, advantages, response_mask, loss_agg_mode,
config, rollout_is_weights). Our policy loss (`POLICY_LOSS_NAME`) takes the token weights of
`trainer.backends.verl_batch` (global denominators, so any aggregation mode, rollout-token-mean by default) from its
`config` (`VerlLossSettings.token_weights`) and returns the weighted token sum computed by
`trainer.losses.policy_loss`, with our off-policy correction (`LossConfig.off_policy`: sequence masks in bypass mode;
truncated pi_prox / pi_behav weights when the batch carries `rollout_log_probs` beside recomputed `old_log_probs`, as
`VerlBackend` builds it under `recompute_behaviour`).
`rollout_is_weights` keeps verl's meaning: when a batch holds verl's own rollout-correction weights (verl's
`compute_rollout_correction_and_add_to_batch` writes `rollout_is_weights` and masks `response_mask`), they multiply
the token weights, so verl's correction and ours can be combined (use one of them: both would weight twice).

`actor_loss` also reports the `off_policy/...` raw statistics (`trainer.off_policy_metrics`, every lag bucket, SUM/MIN/
MAX metrics) of the trainer's logprobs against the recorded ones, when the batch carries `policy_versions` and the
data the trainer's version (`trainer_version`): in bypass mode the backend sends it with the first update only, whose
micro-batches run at the step's starting weights (with a recomputation the backend measures that instead).

verl's FSDP engine averages gradients over data-parallel ranks and its metrics over ranks (after summing
micro-batches), so each rank's loss and additive metric shares are multiplied by dp_size: the reduced values are
then the global sums. `actor_loss` is the function a `TrainingWorker` runs per micro-batch (`set_loss_fn`): it
gathers the response-region logprobs from verl's packed model output, calls the registered policy loss, and adds
the KL penalty (when the batch has `ref_log_prob`) and entropy bonus with the same token weights.
This module imports verl.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import torch
from verl.trainer.ppo.core_algos import get_policy_loss_fn, register_policy_loss
from verl.utils.metric import AggregationType, Metric
from verl.workers.utils.padding import no_padding_2_padding

from trainer.backends.verl_batch import ROLLOUT_LOGPROBS_FIELD
from trainer.losses import LossBatch, LossConfig, kl_penalty_T, policy_loss
from trainer.off_policy_metrics import aggregation_of, raw_terms

POLICY_LOSS_NAME = "harnessrl_weighted_ppo"
"""Name of our policy loss in verl's POLICY_LOSS_REGISTRY (`actor.policy_loss.loss_mode`)."""

TOKEN_WEIGHTS_KEY = "token_weights"
"""Batch field holding each response token's loss weight."""
ROLLOUT_LOGPROBS_KEY = ROLLOUT_LOGPROBS_FIELD
"""Batch field of the engine's recorded logprobs when `old_log_probs` holds the trainer's recomputation (decoupled)."""
TRAINER_VERSION_KEY = "trainer_version"
"""Non-tensor data field: the trainer's policy version at the step's start (for the lag of each token)."""
_AGGREGATION = {"sum": AggregationType.SUM, "min": AggregationType.MIN, "max": AggregationType.MAX}


@dataclass(frozen=True)
class VerlLossSettings:
    """What our policy loss reads from verl's `config` argument, for one micro-batch."""

    loss: LossConfig
    """Clip, dual clip, KL and entropy settings."""
    dp_size: int = 1
    """Data-parallel ranks (verl's data["dp_size"])."""
    batch_num_tokens: int | None = None
    """Trainable tokens over the whole update, all ranks (verl's data["batch_num_tokens"])."""
    token_weights: torch.Tensor | None = None
    """[B, R] loss weight of each response token (verl_batch's token_weights); required."""
    behaviour_log_prob: torch.Tensor | None = None
    """[B, R] the engine's recorded logprobs when old_log_prob is the trainer's recomputation (decoupled PPO)."""

    @property
    def global_batch_info(self) -> dict[str, Any]:
        """verl's name for the update-wide counts."""
        return {"dp_size": self.dp_size, "batch_num_tokens": self.batch_num_tokens}


def _settings(config: Any) -> VerlLossSettings:
    """Our settings from either a VerlLossSettings or verl's ActorConfig (clip_ratio*, global_batch_info)."""
    if isinstance(config, VerlLossSettings):
        return config
    if config is None or not hasattr(config, "global_batch_info"):
        raise ValueError(
            f"policy loss {POLICY_LOSS_NAME!r} got config={type(config).__name__}; pass a VerlLossSettings or "
            "verl's ActorConfig (it reads clip_ratio_low/high/c and global_batch_info)"
        )
    low = config.clip_ratio_low if config.clip_ratio_low is not None else config.clip_ratio
    high = config.clip_ratio_high if config.clip_ratio_high is not None else config.clip_ratio
    info = config.global_batch_info
    return VerlLossSettings(
        LossConfig(clip_low=low, clip_high=high, dual_clip_c=getattr(config, "clip_ratio_c", 3.0)),
        dp_size=int(info.get("dp_size", 1)),
        batch_num_tokens=info.get("batch_num_tokens"),
    )


@register_policy_loss(POLICY_LOSS_NAME)
def weighted_ppo_policy_loss(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-sum",
    config: Any = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """PPO-clip token losses times our token weights (times verl's `rollout_is_weights` if any), summed, times dp_size.

    `loss_agg_mode` is ignored: the weights already encode the aggregation.
    """
    settings = _settings(config)
    if settings.token_weights is None:
        raise ValueError(
            f"policy loss {POLICY_LOSS_NAME!r} needs the per-token weights in VerlLossSettings.token_weights; build "
            "the batch with trainer.backends.verl_batch.to_verl_rows and train with "
            "trainer.backends.verl_loss.actor_loss"
        )
    mask = response_mask.to(torch.bool)
    tokens = settings.batch_num_tokens if settings.batch_num_tokens is not None else int(mask.sum())
    scale = float(settings.dp_size)
    weights_N = settings.token_weights[mask].double() * scale
    if rollout_is_weights is not None:
        weights_N = weights_N * rollout_is_weights[mask].double()
    rows_N = torch.arange(mask.shape[0], device=mask.device)[:, None].expand_as(mask)[mask]
    behaviour = settings.behaviour_log_prob
    batch = LossBatch(
        old_logprobs_T=old_log_prob[mask].float(),
        advantages_T=advantages[mask].float(),
        weights_T=weights_N,
        token_share_T=torch.full((int(mask.sum()),), scale / max(int(tokens), 1), dtype=torch.float64,
                                 device=log_prob.device),
        behaviour_logprobs_T=behaviour[mask].float() if behaviour is not None else None,
        sequence_ids_T=rows_N,
    )
    pg_config = replace(settings.loss, kl_coef=0.0, entropy_coef=0.0)
    output = policy_loss(log_prob[mask].float(), batch, pg_config)
    return output.loss, dict(output.metrics)


def actor_loss(
    model_output: Mapping[str, Any], data: Any, dp_group: Any = None, *, config: LossConfig
) -> tuple[torch.Tensor, dict[str, Metric]]:
    """One micro-batch's loss share on a verl TrainingWorker (bind `config` with functools.partial)."""
    log_prob = no_padding_2_padding(model_output["log_probs"], data)
    entropy = model_output.get("entropy", None)
    fields = ["response_mask", "old_log_probs", "advantages", TOKEN_WEIGHTS_KEY]
    optional = ("ref_log_prob", "rollout_is_weights", ROLLOUT_LOGPROBS_KEY, "policy_versions")
    fields += [name for name in optional if name in data.keys()]  # noqa: SIM118 (TensorDict has no `in`)
    batch = data.select(*fields).to_padded_tensor()
    present = set(batch.keys())
    settings = VerlLossSettings(
        config,
        dp_size=int(data["dp_size"]),
        batch_num_tokens=int(data["batch_num_tokens"]),
        token_weights=batch[TOKEN_WEIGHTS_KEY],
        behaviour_log_prob=batch[ROLLOUT_LOGPROBS_KEY] if ROLLOUT_LOGPROBS_KEY in present else None,
    )
    loss, metrics = get_policy_loss_fn(POLICY_LOSS_NAME)(
        old_log_prob=batch["old_log_probs"],
        log_prob=log_prob,
        advantages=batch["advantages"],
        response_mask=batch["response_mask"],
        loss_agg_mode="token-sum",
        config=settings,
        rollout_is_weights=batch["rollout_is_weights"] if "rollout_is_weights" in present else None,
    )
    mask = batch["response_mask"].to(torch.bool)
    weights_N = batch[TOKEN_WEIGHTS_KEY][mask].to(torch.float32) * settings.dp_size
    if config.kl_coef:
        if "ref_log_prob" not in batch.keys():  # noqa: SIM118 (TensorDict has no `in`)
            raise ValueError(f"kl_coef={config.kl_coef} needs ref_log_prob in the batch; compute it or set kl_coef=0")
        kl_N = kl_penalty_T(log_prob[mask].float(), batch["ref_log_prob"][mask].float(), config.kl_estimator)
        kl = (kl_N * weights_N).sum()
        loss = loss + config.kl_coef * kl
        metrics["loss/kl"] = float(kl.detach())
    if entropy is not None:
        entropy_N = no_padding_2_padding(entropy, data)[mask].float()
        entropy_sum = (entropy_N * weights_N).sum()
        loss = loss - config.entropy_coef * entropy_sum
        metrics["loss/entropy"] = float(entropy_sum.detach())
    metrics["loss/total"] = float(loss.detach())
    reported = {key: Metric(AggregationType.SUM, value) for key, value in metrics.items()}
    reported.update(_off_policy_raw(log_prob, batch, data, settings.dp_size))
    return loss, reported


def _off_policy_raw(log_prob: torch.Tensor, batch: Any, data: Any, dp_size: int) -> dict[str, Metric]:
    """Raw off-policy statistics of the micro-batch (trainer against recorded logprobs), as verl metrics."""
    if "policy_versions" not in batch.keys() or TRAINER_VERSION_KEY not in data.keys():  # noqa: SIM118
        return {}
    mask = batch["response_mask"].to(torch.bool)
    decoupled = ROLLOUT_LOGPROBS_KEY in batch.keys()  # noqa: SIM118
    trainer = batch["old_log_probs"] if decoupled else log_prob.detach()
    behaviour = batch[ROLLOUT_LOGPROBS_KEY] if decoupled else batch["old_log_probs"]
    lags = int(data[TRAINER_VERSION_KEY]) - batch["policy_versions"][mask].long()
    raw = raw_terms(trainer[mask], behaviour[mask], lags, every_bucket=True)
    reported = {}
    for key, value in raw.items():
        how = aggregation_of(key)
        reported[key] = Metric(_AGGREGATION[how], value * dp_size if how == "sum" else value)
    return reported
