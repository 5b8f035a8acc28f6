"""The rewards a step trains on, from one function for both of their readers: each finished rollout's grader reward,
lowered by the soft overlong penalty (`trainer.overlong`), then raised by the format term (`trainer.format_reward`).

`prepare_step` computes the advantages from them, and dynamic sampling's signal test (`trainer.dynamic_sampling`)
decides from them, so the filter keeps a group whose only variance is the format term and drops one the penalty made
flat, as the step sees them. The grader's reward stays as it is in the store: `rollout/` metrics and validation are
unshaped; `advantages/reward_mean` is the mean of these.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gateway.records import Rollout
from trainer.advantages import AdvantageConfig, RolloutOutcome
from trainer.format_reward import add_format_reward
from trainer.overlong import penalize_overlong
from trainer.recorded import recorded_calls
from trainer.rollout_groups import FinishedGroup
from trainer.samples import RecordedCall


def outcome_of(rollout: Rollout) -> RolloutOutcome:
    """The advantage estimator's view of a finished rollout, with the grader's reward."""
    return RolloutOutcome(rollout.id, rollout.group_id, rollout.reward, rollout.failure_kind)


@dataclass(frozen=True)
class TrainedRewards:
    """Every rollout of some groups with the reward the step trains on, and what shaping it took."""

    outcomes: list[RolloutOutcome]
    """One per rollout, in the groups' order: a graded rollout's reward shaped, an ungraded one as it was."""
    calls: list[RecordedCall]
    """The rollouts' recorded calls (final attempts): what the penalty measured and what samples are built from."""
    metrics: dict[str, float]
    """The penalty's and the format term's `advantages/` metrics (none for a term that is off)."""


def trained_rewards(groups: Sequence[FinishedGroup], advantage: AdvantageConfig,
                    format_shares: Mapping[str, float] | None = None) -> TrainedRewards:
    """The rewards `groups`' rollouts train with under `advantage`: the overlong penalty, then the format term
    (`format_shares`: rollout id -> share of its turns in the harness's action format; required when the term is on)."""
    rollouts = [r for group in groups for r in group.rollouts]
    calls = [c for group in groups for r in group.rollouts for c in recorded_calls(r, group.calls.get(r.id, ()))]
    outcomes, overlong = penalize_overlong([outcome_of(r) for r in rollouts], calls, advantage)
    outcomes, formats = add_format_reward(outcomes, format_shares, advantage)
    return TrainedRewards(outcomes, calls, {**overlong, **formats})
