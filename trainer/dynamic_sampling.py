"""DAPO-style dynamic sampling: draw complete groups until the batch holds `batch_groups` groups with signal.

A group has signal when at least two of its counted members (after the staleness drop and the advantage config's
failure handling) got different rewards: the rewards the step trains on (`trainer.trained_rewards`: the grader's, with
the overlong penalty and the format term), from the same function that feeds the step's advantages, so a group whose
only variance is the format term is kept and one the penalty made flat is dropped. Groups without it are dropped (as
`filter_zero_variance` would) and more are drawn, up to `max_draws` draws per batch (verl's `max_num_gen_batches`); a
batch still short after that trains on the groups it has and says so in its metrics (with none at all, it hands back
the groups drawn: no gradient signal). The draw itself (fill the feed, wait for n complete groups) is the caller's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from trainer.advantages import AdvantageConfig, group_index_R, member_rewards, zero_variance_G
from trainer.rollout_groups import FinishedGroup, drop_stale
from trainer.trained_rewards import trained_rewards

FormatShares = Callable[[Sequence[FinishedGroup]], Mapping[str, float]]
"""Reads groups' format shares (rollout id -> share of its turns in the harness's action format), as the step's."""


@dataclass(frozen=True)
class DynamicSamplingConfig:
    """Whether and how far to refill a batch with groups that have reward variance."""

    enabled: bool = False
    """Refill the batch until it holds batch_groups groups with reward variance (DAPO); groups without are dropped."""
    max_draws: int = 4
    """Most draws of complete groups per batch (the first included); a batch still short then trains as it is."""

    def __post_init__(self) -> None:
        if self.max_draws < 1:
            raise ValueError(f"DynamicSamplingConfig.max_draws={self.max_draws}: use at least 1")


def group_has_signal(group: FinishedGroup, advantage: AdvantageConfig, policy_version: int, max_version_lag: int,
                     format_shares: FormatShares | None = None) -> bool:
    """At least two of the group's members that will count got different trained rewards (`format_shares` reads the
    kept members' shares for the format term; required when `advantage.format_reward` is on)."""
    kept = drop_stale([group], policy_version, max_version_lag).kept
    shares = format_shares(kept) if format_shares is not None else None
    rewards, _ = member_rewards(trained_rewards(kept, advantage, shares).outcomes, advantage)
    rewards_M = np.fromiter(rewards.values(), dtype=np.float64, count=len(rewards))
    group_M, num_groups = group_index_R([group.group_id] * len(rewards))
    return bool((~zero_variance_G(rewards_M, group_M, num_groups)).any())


@dataclass(frozen=True)
class SignalGroups:
    """The groups a dynamically sampled batch trains on, and what it took to find them."""

    groups: list[FinishedGroup]
    """Groups with signal, at most batch_groups; when none had any, every group drawn (the step then reports "no
    gradient signal" with their rewards)."""
    metrics: dict[str, float]
    """dynamic_sampling/ counts: groups drawn, dropped for no signal, draws, short (1.0 when under batch_groups)."""


def collect_with_signal(draw: Callable[[int], Sequence[FinishedGroup]], has_signal: Callable[[FinishedGroup], bool],
                        batch_groups: int, config: DynamicSamplingConfig) -> SignalGroups:
    """Draws `batch_groups` groups, keeps those with signal, and draws the shortfall again, up to `max_draws` times."""
    kept: list[FinishedGroup] = []
    dropped: list[FinishedGroup] = []
    drawn = draws = 0
    while len(kept) < batch_groups and draws < config.max_draws:
        groups = list(draw(batch_groups - len(kept)))
        draws += 1
        drawn += len(groups)
        for group in groups:
            (kept if has_signal(group) else dropped).append(group)
    metrics = {"dynamic_sampling/groups_drawn": float(drawn), "dynamic_sampling/groups_dropped": float(len(dropped)),
               "dynamic_sampling/draws": float(draws), "dynamic_sampling/short": float(len(kept) < batch_groups)}
    return SignalGroups(kept or dropped, metrics)
