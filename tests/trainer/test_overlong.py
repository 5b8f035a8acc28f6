"""Soft overlong punishment (DAPO) at rollout level: hand-computed penalties, the worst call counts."""

from __future__ import annotations

import pytest

from tests.trainer.loop_support import call, group
from trainer.advantages import AdvantageConfig, RolloutOutcome
from trainer.overlong import overlong_penalty, penalize_overlong
from trainer.prepared_step import prepare_step
from trainer.samples import RecordedCall, SampleLimits

SOFT = AdvantageConfig(overlong_max_tokens=100, overlong_buffer_tokens=20)


@pytest.mark.parametrize(("tokens", "factor", "expected"), [
    (50, 1.0, 0.0), (80, 1.0, 0.0), (90, 1.0, -0.5), (95, 1.0, -0.75), (100, 1.0, -1.0), (130, 1.0, -1.0),
    (90, 0.5, -0.25),
])
def test_penalty_grows_linearly_through_the_buffer(tokens, factor, expected):
    config = AdvantageConfig(overlong_max_tokens=100, overlong_buffer_tokens=20, overlong_penalty_factor=factor)
    assert overlong_penalty(tokens, config) == pytest.approx(expected)


def test_off_by_default():
    assert overlong_penalty(10_000, AdvantageConfig()) == 0.0


def recorded(rid: str, seq: int, tokens: int, ok: bool = True) -> RecordedCall:
    return RecordedCall(rid, "g", seq, (1,), tuple(range(tokens)), (-1.0,) * tokens, 0, ok, "stop")


def test_the_longest_call_of_a_rollout_counts_and_ungraded_rollouts_are_left_alone():
    outcomes = [RolloutOutcome("a", "g", 1.0, None), RolloutOutcome("b", "g", 0.5, None),
                RolloutOutcome("c", "g", None, "infra")]
    calls = [recorded("a", 0, 10), recorded("a", 1, 90), recorded("b", 0, 85), recorded("b", 1, 200, ok=False),
             recorded("c", 0, 100)]
    shaped, metrics = penalize_overlong(outcomes, calls, SOFT)
    assert [o.reward for o in shaped] == pytest.approx([0.5, 0.25, None])
    assert metrics["advantages/overlong_penalized_rollouts"] == 2.0


def test_a_penalty_gives_a_flat_group_signal():
    def calls(rid):
        return (call(rid, 0, 0, list(range(100 if rid == "long" else 5))),)

    flat = group("g", {"long": 1.0, "short": 1.0}, calls=calls)
    assert prepare_step([flat], AdvantageConfig(), SampleLimits()).no_signal
    shaped = prepare_step([flat], SOFT, SampleLimits())
    by_rollout = {s.rollout_id: a for s, a in zip(shaped.batch.samples, shaped.batch.advantages_S, strict=True)}
    assert by_rollout["long"] < 0 < by_rollout["short"]
    assert shaped.metrics["rollout/reward_mean"] == 1.0  # the logged reward is the grader's


@pytest.mark.parametrize("buffer", [0, 101])
def test_a_buffer_outside_the_budget_is_rejected(buffer):
    with pytest.raises(ValueError, match="overlong_buffer_tokens"):
        AdvantageConfig(overlong_max_tokens=100, overlong_buffer_tokens=buffer)
