"""The rollout state machine, over every pair of states."""

from __future__ import annotations

import itertools

import pytest

from gateway.records import TERMINAL_STATES, RolloutState, can_transition

Q, R, S, F, C = (RolloutState.QUEUED, RolloutState.RUNNING, RolloutState.SUCCEEDED, RolloutState.FAILED,
                 RolloutState.CANCELLED)
ALLOWED = {(Q, R), (Q, C), (R, S), (R, F), (R, C), (R, Q)}


@pytest.mark.parametrize(("current", "target"), list(itertools.product(RolloutState, repeat=2)))
def test_can_transition_matches_the_table(current: RolloutState, target: RolloutState) -> None:
    assert can_transition(current, target) is ((current, target) in ALLOWED)


@pytest.mark.parametrize("state", sorted(TERMINAL_STATES))
def test_terminal_states_have_no_way_out(state: RolloutState) -> None:
    assert not any(can_transition(state, target) for target in RolloutState)


def test_terminal_states_are_exactly_the_finishing_ones() -> None:
    assert {S, F, C} == TERMINAL_STATES
