"""Complete groups → one `TrainBatch`: recorded calls → samples → rollout-level advantages, with the step's metrics.

This is the algorithm's middle between "wait for finished rollouts" and "update": it keeps no state. When no group
has reward variance there is no gradient signal; the result says so (`batch is None`, `no_signal`) rather than
training on zero advantages.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from gateway.records import Rollout
from rollouts.groups import scored_reward
from trainer.advantages import AdvantageConfig, sample_advantages
from trainer.backends.base import TrainBatch
from trainer.rollout_groups import FinishedGroup
from trainer.samples import SampleLimits, build_samples
from trainer.split_spread import split_spread_metrics
from trainer.trained_rewards import trained_rewards


@dataclass(frozen=True)
class PreparedStep:
    """What one step trains on, and what it saw."""

    batch: TrainBatch | None
    """Every kept rollout's samples (zero advantages included), or None when no sample carries gradient signal."""
    metrics: dict[str, float]
    """Rewards, pass rate, sample and advantage statistics."""

    @property
    def no_signal(self) -> bool:
        """No group had reward variance: nothing to learn from this batch."""
        return self.batch is None


def reward_metrics(rollouts: Sequence[Rollout], pass_threshold: float, prefix: str,
                   failure_reward: float = 0.0, unfinished: int = 0) -> dict[str, float]:
    """Reward mean / std and pass rate (reward >= pass_threshold) over every rollout but the infrastructure's
    failures, with failure counts. An agent failure without a reward (a harness that timed out or exited non-zero)
    counts at `failure_reward`, as the step trains on it (`AdvantageConfig.agent_failure_reward`): a policy that fails
    the hard tasks outright does not raise the mean by leaving them out. So do `unfinished` rollouts (a validation
    pass's tasks whose group did not finish in its time: a policy that stalls on what it cannot solve)."""
    scored = [scored_reward(r, failure_reward) for r in rollouts] + [failure_reward] * unfinished
    rewards_R = np.array([reward for reward in scored if reward is not None], dtype=np.float64)
    return {
        f"{prefix}/reward_mean": float(rewards_R.mean()) if rewards_R.size else 0.0,
        f"{prefix}/reward_std": float(rewards_R.std()) if rewards_R.size else 0.0,
        f"{prefix}/pass_rate": float((rewards_R >= pass_threshold).mean()) if rewards_R.size else 0.0,
        f"{prefix}/rollouts": float(len(rollouts)),
        f"{prefix}/scored": float(rewards_R.size),
        f"{prefix}/graded": float(sum(1 for r in rollouts if r.reward is not None)),
        f"{prefix}/failed_agent": float(sum(1 for r in rollouts if r.failure_kind == "agent")),
        f"{prefix}/failed_infra": float(sum(1 for r in rollouts if r.failure_kind == "infra")),
    }


def prepare_step(groups: Sequence[FinishedGroup], advantage: AdvantageConfig, limits: SampleLimits,
                 pass_threshold: float = 1.0, decode: Callable[[Sequence[int]], str] | None = None,
                 format_shares: Mapping[str, float] | None = None) -> PreparedStep:
    """Samples and advantages of `groups` (rollout level by default); every kept rollout is in the batch.
    The advantages come from the trained rewards (`trainer.trained_rewards`: the overlong penalty and the format term
    applied, the same rewards dynamic sampling's signal test reads); `format_shares` (rollout id -> share of its turns
    in the harness's action format) feed the optional format term (`advantage.format_reward`)."""
    rollouts = [r for group in groups for r in group.rollouts]
    rewards = trained_rewards(groups, advantage, format_shares)
    built = build_samples(rewards.calls, limits=limits, decode=decode)
    rollout_ids = [sample.rollout_id for sample in built.samples]
    advantages = sample_advantages(rollout_ids, rewards.outcomes, advantage)
    metrics = {**reward_metrics(rollouts, pass_threshold, "rollout", advantage.reported_failure_reward),
               **built.stats.as_metrics(), **advantages.metrics, **rewards.metrics,
               "rollout/groups": float(len(groups)),
               **split_spread_metrics((sample.rollout_id, sample.group_id) for sample in built.samples)}
    signal_S = advantages.keep_S & (advantages.advantages_S != 0.0)
    metrics["advantages/groups_with_signal"] = float(len({built.samples[s].group_id for s in np.flatnonzero(signal_S)}))
    if not signal_S.any():
        return PreparedStep(None, metrics)
    # Every kept rollout enters the batch, zero advantage included, so that the loss denominators count every rollout
    # taken (verl's semantics); `filter_zero_variance` (or dynamic sampling) is what leaves flat groups out.
    keep = np.flatnonzero(advantages.keep_S)
    samples = [built.samples[s] for s in keep]
    batch_rollouts = {sample.rollout_id for sample in samples}
    signal_rollouts = {built.samples[s].rollout_id for s in np.flatnonzero(signal_S)}
    metrics["batch/rollouts"] = float(len(batch_rollouts))
    metrics["batch/rollouts_zero_advantage"] = float(len(batch_rollouts - signal_rollouts))
    return PreparedStep(TrainBatch.of(samples, advantages.advantages_S[keep]), metrics)
