"""Group-relative advantages (GRPO, RLOO, REINFORCE++-baseline), rollout level by default.

At rollout level every rollout is one member of its group's statistics, whatever number of samples
(zero included) it produced, and its advantage is broadcast to all its samples. At sample level (an
ablation switch) every sample is a member carrying its rollout's reward, so rollouts that split into
more samples weigh more. `infra` failures are excluded (they are retried upstream); `agent` failures
count with a configurable reward. Groups whose members all have the same reward get zero advantage
(singletons included, unlike verl, which returns s / (1 + eps) for them) and can be filtered out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from gateway.records import FailureKind

Estimator = Literal["grpo", "rloo", "reinforce_pp_baseline"]
"""Supported advantage estimators."""

Level = Literal["rollout", "sample"]
"""Who is a member of the group statistics."""


@dataclass(frozen=True)
class RolloutOutcome:
    """A finished rollout's result, as the advantage computation needs it."""

    rollout_id: str
    """The rollout."""
    group_id: str
    """Its group (rollouts of the same task)."""
    reward: float | None
    """The grader's reward; None when the rollout failed before grading."""
    failure_kind: FailureKind | None
    """None for a rollout that succeeded, else why it failed."""


@dataclass(frozen=True)
class AdvantageConfig:
    """How advantages are computed."""

    estimator: Estimator = "grpo"
    """Which estimator."""
    norm_by_std: bool = True
    """GRPO: divide by the group's std (Bessel-corrected) + epsilon; False gives Dr. GRPO style."""
    epsilon: float = 1e-6
    """Added to the std in GRPO's denominator."""
    level: Level = "rollout"
    """rollout: each rollout counts once; sample: each sample counts (ablation)."""
    agent_failure_reward: float | None = 0.0
    """Reward given to agent failures without one (the controller posts the recipe's failure reward for each, so only
    records without it: another controller's); None excludes those like infra failures."""
    filter_zero_variance: bool = False
    """Drop the samples of groups whose members all share one reward, out of the batch and its loss denominators
    (false: they train with advantage 0 and count in the denominators, as every rollout taken does in verl)."""
    overlong_max_tokens: int | None = None
    """Soft overlong punishment (DAPO; None: off): a rollout whose longest call response exceeds overlong_max_tokens -
    overlong_buffer_tokens loses (excess / buffer) x overlong_penalty_factor of reward, the whole factor at the limit;
    set it to the harness's max_tokens (trainer.overlong)."""
    overlong_buffer_tokens: int = 0
    """The soft punishment's buffer: the last this many tokens before overlong_max_tokens."""
    overlong_penalty_factor: float = 1.0
    """The soft punishment's largest penalty."""
    format_reward: float = 0.0
    """Training-only shaping term (0: off): a graded rollout's reward + format_reward x its share from the recipe's
    `shaping_shares` hook (e.g. its agent turns in the harness's action format, read from the gateway's call records;
    trainer.format_reward); a recipe without the hook refuses it; validation rewards stay unshaped."""

    @property
    def reported_failure_reward(self) -> float:
        """What an agent failure without a reward counts as in the reward metrics: `agent_failure_reward`, or 0.0 when
        that leaves such failures out of the advantages (a metric never drops them)."""
        return 0.0 if self.agent_failure_reward is None else self.agent_failure_reward

    def __post_init__(self) -> None:
        if not self.format_reward >= 0:
            raise ValueError(f"AdvantageConfig.format_reward={self.format_reward}: use 0 (off) or a positive weight")
        if self.estimator not in ("grpo", "rloo", "reinforce_pp_baseline"):
            raise ValueError(
                f"AdvantageConfig.estimator={self.estimator!r}: use 'grpo', 'rloo' or 'reinforce_pp_baseline'"
            )
        if self.level not in ("rollout", "sample"):
            raise ValueError(f"AdvantageConfig.level={self.level!r}: use 'rollout' or 'sample'")
        if self.epsilon < 0:
            raise ValueError(f"AdvantageConfig.epsilon={self.epsilon}: use a non-negative value")
        if self.overlong_max_tokens is not None and not 0 < self.overlong_buffer_tokens <= self.overlong_max_tokens:
            raise ValueError(
                f"AdvantageConfig.overlong_buffer_tokens={self.overlong_buffer_tokens} with overlong_max_tokens="
                f"{self.overlong_max_tokens}: use a buffer between 1 and overlong_max_tokens"
            )


@dataclass(frozen=True)
class SampleAdvantages:
    """One advantage per sample, which samples to train on, and what happened."""

    advantages_S: np.ndarray
    """Advantage of each sample (float64), 0 where not kept."""
    keep_S: np.ndarray
    """False for samples of excluded (infra, unrewarded) or filtered rollouts."""
    metrics: Mapping[str, float]
    """Counts and summary statistics, keys prefixed "advantages/"."""


def group_index_R(group_ids: Sequence[str]) -> tuple[np.ndarray, int]:
    """Dense group index per member (0..G-1) and the number of groups G."""
    _, index_R = np.unique(np.asarray(group_ids, dtype=object).astype(str), return_inverse=True)
    return index_R.reshape(-1), int(index_R.max()) + 1 if len(group_ids) else 0


def _group_mean_count(rewards_R: np.ndarray, group_R: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    count_G = np.bincount(group_R, minlength=int(group_R.max()) + 1 if group_R.size else 0)
    sum_G = np.bincount(group_R, weights=rewards_R, minlength=count_G.size)
    return sum_G / np.maximum(count_G, 1), count_G


def grpo_advantages_R(
    rewards_R: np.ndarray, group_R: np.ndarray, *, norm_by_std: bool = True, epsilon: float = 1e-6
) -> np.ndarray:
    """(r - group mean) / (group std + epsilon), std with Bessel's correction; verl's conventions.

    Singleton groups use mean 0 and std 1, as verl does (so they get r / (1 + epsilon)).
    """
    rewards_R = np.asarray(rewards_R, dtype=np.float64)
    mean_G, count_G = _group_mean_count(rewards_R, group_R)
    single_G = count_G == 1
    mean_G = np.where(single_G, 0.0, mean_G)
    centered_R = rewards_R - mean_G[group_R]
    if not norm_by_std:
        return centered_R
    squares_G = np.bincount(group_R, weights=centered_R**2, minlength=count_G.size)
    std_G = np.sqrt(squares_G / np.maximum(count_G - 1, 1))
    std_G = np.where(single_G, 1.0, std_G)
    return centered_R / (std_G[group_R] + epsilon)


def rloo_advantages_R(rewards_R: np.ndarray, group_R: np.ndarray) -> np.ndarray:
    """Reward minus the mean of the other members' rewards; singletons keep their raw reward (verl)."""
    rewards_R = np.asarray(rewards_R, dtype=np.float64)
    mean_G, count_G = _group_mean_count(rewards_R, group_R)
    n_R = count_G[group_R].astype(np.float64)
    scale_R = np.where(n_R > 1, n_R / np.maximum(n_R - 1, 1), 1.0)
    baseline_R = np.where(n_R > 1, mean_G[group_R], 0.0)
    return (rewards_R - baseline_R) * scale_R


def reinforce_pp_baseline_advantages_R(
    rewards_R: np.ndarray, group_R: np.ndarray, epsilon: float = 1e-8
) -> np.ndarray:
    """Group-mean baseline, then whitening over the members of groups with reward variance; the others get 0.

    One-member groups and groups whose members share one reward carry no signal, so they neither get an advantage
    nor enter the batch mean and std (verl lets them in, with a singleton keeping its raw reward, which can flip the
    sign of every other advantage). verl whitens over tokens; this whitens over members (rollouts by default).
    """
    rewards_R = np.asarray(rewards_R, dtype=np.float64)
    advantages_R = np.zeros_like(rewards_R)
    if rewards_R.size == 0:
        return advantages_R
    num_groups = int(group_R.max()) + 1
    _, count_G = _group_mean_count(rewards_R, group_R)
    signal_R = ((count_G > 1) & ~zero_variance_G(rewards_R, group_R, num_groups))[group_R]
    if signal_R.sum() < 2:
        return advantages_R
    centered_R = grpo_advantages_R(rewards_R, group_R, norm_by_std=False)[signal_R]
    advantages_R[signal_R] = (centered_R - centered_R.mean()) / np.sqrt(centered_R.var(ddof=1) + epsilon)
    return advantages_R


def zero_variance_G(rewards_R: np.ndarray, group_R: np.ndarray, num_groups: int) -> np.ndarray:
    """True for groups whose members all share one reward (singletons included)."""
    max_G = np.full(num_groups, -np.inf)
    min_G = np.full(num_groups, np.inf)
    np.maximum.at(max_G, group_R, rewards_R)
    np.minimum.at(min_G, group_R, rewards_R)
    return max_G == min_G


def estimate_R(rewards_R: np.ndarray, group_R: np.ndarray, config: AdvantageConfig) -> np.ndarray:
    """The configured estimator's advantage per member."""
    if config.estimator == "grpo":
        return grpo_advantages_R(rewards_R, group_R, norm_by_std=config.norm_by_std, epsilon=config.epsilon)
    if config.estimator == "rloo":
        return rloo_advantages_R(rewards_R, group_R)
    return reinforce_pp_baseline_advantages_R(rewards_R, group_R)


def sample_advantages(
    sample_rollout_ids: Sequence[str],
    outcomes: Sequence[RolloutOutcome],
    config: AdvantageConfig = AdvantageConfig(),
) -> SampleAdvantages:
    """Advantages for samples (given by their rollout ids) from their rollouts' outcomes."""
    rewards, excluded = member_rewards(outcomes, config)
    by_id = {outcome.rollout_id: outcome for outcome in outcomes}
    missing = sorted({rid for rid in sample_rollout_ids if rid not in by_id})
    if missing:
        raise ValueError(
            f"samples of rollouts {missing[:5]} have no RolloutOutcome; pass every rollout's outcome"
        )
    if config.level == "rollout":
        member_ids = [outcome.rollout_id for outcome in outcomes if outcome.rollout_id in rewards]
    else:
        member_ids = [rid for rid in sample_rollout_ids if rid in rewards]
    rewards_M = np.array([rewards[rid] for rid in member_ids], dtype=np.float64)
    group_M, num_groups = group_index_R([by_id[rid].group_id for rid in member_ids])
    advantages_M = estimate_R(rewards_M, group_M, config) if member_ids else np.zeros(0)
    flat_G = zero_variance_G(rewards_M, group_M, num_groups)
    advantages_M = np.where(flat_G[group_M], 0.0, advantages_M)
    keep_M = ~flat_G[group_M] if config.filter_zero_variance else np.ones(len(member_ids), dtype=bool)
    advantages_S, keep_S = _to_samples(sample_rollout_ids, member_ids, advantages_M, keep_M, config.level)
    metrics = {
        "advantages/groups": float(num_groups),
        "advantages/zero_variance_groups": float(flat_G.sum()),
        "advantages/members": float(len(member_ids)),
        "advantages/rollouts_excluded_infra": float(excluded["infra"]),
        "advantages/rollouts_excluded_agent": float(excluded["agent"]),
        "advantages/rollouts_agent_failed": float(excluded["agent_counted"]),
        "advantages/samples_kept": float(keep_S.sum()),
        "advantages/samples_dropped": float((~keep_S).sum()),
        "advantages/reward_mean": float(rewards_M.mean()) if member_ids else 0.0,
        "advantages/advantage_abs_mean": float(np.abs(advantages_S[keep_S]).mean()) if keep_S.any() else 0.0,
    }
    return SampleAdvantages(advantages_S, keep_S, metrics)


def member_rewards(
    outcomes: Sequence[RolloutOutcome], config: AdvantageConfig
) -> tuple[dict[str, float], dict[str, int]]:
    """Reward of every rollout that takes part in group statistics, and counts of the others."""
    rewards: dict[str, float] = {}
    counts = {"infra": 0, "agent": 0, "agent_counted": 0}
    seen: set[str] = set()
    for outcome in outcomes:
        if outcome.rollout_id in seen:
            raise ValueError(f"rollout {outcome.rollout_id!r} has two outcomes; pass one per rollout")
        seen.add(outcome.rollout_id)
        if outcome.failure_kind == FailureKind.INFRA:
            counts["infra"] += 1
        elif outcome.failure_kind == FailureKind.AGENT:
            reward = outcome.reward if outcome.reward is not None else config.agent_failure_reward
            if reward is None:
                counts["agent"] += 1
            else:
                counts["agent_counted"] += 1
                rewards[outcome.rollout_id] = float(reward)
        elif outcome.failure_kind is None:
            if outcome.reward is None:
                raise ValueError(
                    f"rollout {outcome.rollout_id!r} succeeded without a reward; grade it "
                    "or mark it failed (failure_kind='agent' or 'infra')"
                )
            rewards[outcome.rollout_id] = float(outcome.reward)
        else:
            raise ValueError(
                f"rollout {outcome.rollout_id!r} has failure_kind={outcome.failure_kind!r}; "
                "use None, 'agent' or 'infra'"
            )
    return rewards, counts


def _to_samples(
    sample_rollout_ids: Sequence[str],
    member_ids: list[str],
    advantages_M: np.ndarray,
    keep_M: np.ndarray,
    level: Level,
) -> tuple[np.ndarray, np.ndarray]:
    """Broadcast member advantages to samples: by rollout id, or one to one at sample level."""
    advantages_S = np.zeros(len(sample_rollout_ids), dtype=np.float64)
    keep_S = np.zeros(len(sample_rollout_ids), dtype=bool)
    if level == "rollout":
        index = {rid: m for m, rid in enumerate(member_ids)}
        for s, rid in enumerate(sample_rollout_ids):
            m = index.get(rid)
            if m is not None:
                advantages_S[s], keep_S[s] = advantages_M[m], keep_M[m]
    else:
        members = set(member_ids)
        members_S = np.array([rid in members for rid in sample_rollout_ids], dtype=bool)
        advantages_S[members_S], keep_S[members_S] = advantages_M, keep_M
    return np.where(keep_S, advantages_S, 0.0), keep_S
