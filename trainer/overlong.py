"""Soft overlong punishment (DAPO) at rollout level: a rollout whose longest call response ran into the length budget
loses reward before advantages are computed.

With L_max = `AdvantageConfig.overlong_max_tokens` and a buffer of B tokens, a response of L tokens costs
min(0, (L_max - B - L) / B) x factor, at most the whole factor (as verl's DAPO reward manager, which has no cap
because its responses never pass L_max). A rollout is as long as its longest call: the worst call's penalty counts.
The alternative, masking the cut-off calls (DAPO's overlong filtering), is `SampleLimits.length_calls = "mask"`.
`trainer.trained_rewards` applies it (before the format term) for both the step's advantages and dynamic sampling's
signal test.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from trainer.advantages import AdvantageConfig, RolloutOutcome
from trainer.samples import RecordedCall


def overlong_penalty(response_tokens: int, config: AdvantageConfig) -> float:
    """The (non-positive) reward change of one response of `response_tokens` tokens; 0 when the punishment is off."""
    if config.overlong_max_tokens is None:
        return 0.0
    exceed = response_tokens - (config.overlong_max_tokens - config.overlong_buffer_tokens)
    return max(min(-exceed / config.overlong_buffer_tokens, 0.0), -1.0) * config.overlong_penalty_factor


def penalize_overlong(outcomes: Sequence[RolloutOutcome], calls: Sequence[RecordedCall],
                      config: AdvantageConfig) -> tuple[list[RolloutOutcome], dict[str, float]]:
    """`outcomes` with each graded rollout's reward lowered by its longest call's penalty, and the counts."""
    if config.overlong_max_tokens is None:
        return list(outcomes), {}
    longest: dict[str, int] = {}
    for call in calls:
        if call.ok:
            lengths = [len(call.response_token_ids), *(len(c.response_token_ids) for c in call.extra_choices)]
            longest[call.rollout_id] = max(longest.get(call.rollout_id, 0), *lengths)
    shaped, penalties = [], []
    for outcome in outcomes:
        penalty = overlong_penalty(longest.get(outcome.rollout_id, 0), config)
        if outcome.reward is not None and penalty < 0:
            penalties.append(penalty)
            outcome = replace(outcome, reward=outcome.reward + penalty)
        shaped.append(outcome)
    metrics = {"advantages/overlong_penalized_rollouts": float(len(penalties)),
               "advantages/overlong_penalty_mean": sum(penalties) / len(outcomes) if outcomes else 0.0}
    return shaped, metrics
