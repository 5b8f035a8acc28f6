"""The training-only format term: hand-computed bonuses, ungraded rollouts left alone, a flat group given signal while
the logged reward stays the grader's, and the errors that name the fix."""

from __future__ import annotations

import pytest

from tests.trainer.loop_support import call, group
from trainer.advantages import AdvantageConfig, RolloutOutcome
from trainer.format_reward import add_format_reward
from trainer.prepared_step import prepare_step
from trainer.samples import SampleLimits

OUTCOMES = [RolloutOutcome("a", "g", 0.0, None), RolloutOutcome("b", "g", 1.0, None),
            RolloutOutcome("c", "g", None, "agent"), RolloutOutcome("d", "g", 0.0, None)]


@pytest.mark.parametrize(("weight", "shares", "rewards", "rewarded"), [
    (0.2, {"a": 1.0, "b": 0.5, "c": 1.0}, [0.2, 1.1, None, 0.0], 2.0),  # d: not named, share 0
    (0.5, {"a": 0.0, "b": 0.0, "d": 0.25}, [0.0, 1.0, None, 0.125], 1.0),
    (1.0, {}, [0.0, 1.0, None, 0.0], 0.0),
])
def test_each_graded_rollout_earns_weight_times_its_share(weight, shares, rewards, rewarded):
    shaped, metrics = add_format_reward(OUTCOMES, shares, AdvantageConfig(format_reward=weight))
    assert [o.reward for o in shaped] == pytest.approx(rewards)
    assert [o.failure_kind for o in shaped] == [o.failure_kind for o in OUTCOMES]
    assert metrics["advantages/format_rewarded_rollouts"] == rewarded
    graded = [r - o.reward for r, o in zip(rewards, OUTCOMES, strict=True) if o.reward is not None]
    assert metrics["advantages/format_bonus_mean"] == pytest.approx(sum(graded) / len(graded))


def test_off_by_default_even_with_shares():
    shaped, metrics = add_format_reward(OUTCOMES, {"a": 1.0}, AdvantageConfig())
    assert shaped == OUTCOMES and metrics == {}


def test_a_flat_group_gets_signal_from_the_format_and_the_logged_reward_stays_the_graders():
    flat = group("g", {"formatted": 0.0, "rambling": 0.0}, calls=lambda rid: (call(rid, 0, 0, [5, 6]),))
    shares = {"formatted": 1.0, "rambling": 0.0}
    assert prepare_step([flat], AdvantageConfig(), SampleLimits(), format_shares=shares).no_signal
    shaped = prepare_step([flat], AdvantageConfig(format_reward=0.2), SampleLimits(), format_shares=shares)
    by_rollout = {s.rollout_id: a for s, a in zip(shaped.batch.samples, shaped.batch.advantages_S, strict=True)}
    assert by_rollout["rambling"] < 0 < by_rollout["formatted"]
    assert shaped.metrics["rollout/reward_mean"] == 0.0
    assert shaped.metrics["advantages/reward_mean"] == pytest.approx(0.1)


def test_the_term_without_shares_names_the_setting():
    with pytest.raises(ValueError, match="algorithm.advantage.format_reward"):
        add_format_reward(OUTCOMES, None, AdvantageConfig(format_reward=0.1))


@pytest.mark.parametrize("share", [-0.1, 1.5, float("nan")])
def test_a_share_outside_zero_one_is_refused(share):
    with pytest.raises(ValueError, match="between 0 and 1"):
        add_format_reward(OUTCOMES, {"a": share}, AdvantageConfig(format_reward=0.1))


@pytest.mark.parametrize("weight", [-0.1, float("nan")])
def test_a_negative_weight_is_refused(weight):
    with pytest.raises(ValueError, match="format_reward"):
        AdvantageConfig(format_reward=weight)
