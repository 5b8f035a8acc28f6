"""A training-only shaping term: each graded rollout earns `AdvantageConfig.format_reward` x its share (in [0, 1])
from the recipe's `shaping_shares` hook, before advantages are computed.

A small model that never writes the harness's action format never solves a task either, so its groups have no reward
variance and nothing is learned (a coding agent on SmolLM2-135M). A shaping term, e.g. the share of the agent's turns
in the harness's action format, gives such groups variance from the first step. Any recipe can define the hook
(rollouts.recipe.RecipeHooks); the shares are read from the gateway's call records (the harness's answers as the
engine produced them), never from anything the policy wrote into its sandbox; the grader's reward is kept as
is in the store, so validation and every `rollout/` metric stay unshaped, and `advantages/reward_mean` is the shaped
mean the advantages were computed from. `trainer.trained_rewards` applies it (after the overlong penalty) for both the
step's advantages and dynamic sampling's signal test.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from trainer.advantages import AdvantageConfig, RolloutOutcome


def add_format_reward(outcomes: Sequence[RolloutOutcome], format_shares: Mapping[str, float] | None,
                      config: AdvantageConfig) -> tuple[list[RolloutOutcome], dict[str, float]]:
    """`outcomes` with each graded rollout's reward raised by format_reward x its format share (0 for a rollout the
    shares do not name), and the term's metrics; unchanged, without metrics, when the term is off."""
    if not config.format_reward:
        return list(outcomes), {}
    if format_shares is None:
        raise ValueError(
            f"AdvantageConfig.format_reward={config.format_reward} but the recipe supplied no shaping shares (it "
            "defines no `shaping_shares` hook); set algorithm.advantage.format_reward to 0 or use a recipe with one"
        )
    for rollout_id, share in format_shares.items():
        if not 0.0 <= share <= 1.0:
            raise ValueError(f"format share {share} of rollout {rollout_id!r}: a share is between 0 and 1")
    shaped, bonuses = [], []
    for outcome in outcomes:
        if outcome.reward is not None:
            bonus = config.format_reward * format_shares.get(outcome.rollout_id, 0.0)
            bonuses.append(bonus)
            outcome = replace(outcome, reward=outcome.reward + bonus)
        shaped.append(outcome)
    metrics = {"advantages/format_bonus_mean": sum(bonuses) / len(bonuses) if bonuses else 0.0,
               "advantages/format_rewarded_rollouts": float(sum(1 for b in bonuses if b > 0))}
    return shaped, metrics
