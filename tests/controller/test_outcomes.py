"""The outcome table: every termination maps to the documented state, failure kind and grading; retries settle."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controller.outcomes import Outcome, classify, settle
from controller.runners.base import RunResult, Termination
from gateway.records import FailureKind, RolloutState

S, F, Q = RolloutState.SUCCEEDED, RolloutState.FAILED, RolloutState.QUEUED
AGENT, INFRA = FailureKind.AGENT, FailureKind.INFRA


def result(termination: Termination, exit_code: int | None = None) -> RunResult:
    return RunResult("r1", 1, termination, exit_code, "detail", 1.0)


@pytest.mark.parametrize(("termination", "exit_code", "last_status", "state", "kind", "graded"), [
    (Termination.EXITED, 0, 200, S, None, True),
    (Termination.EXITED, 0, 502, S, None, True),  # the harness coped with the error itself
    (Termination.EXITED, 0, None, S, None, True),
    (Termination.EXITED, 3, 200, F, AGENT, False),
    (Termination.EXITED, 1, None, F, AGENT, False),
    (Termination.EXITED, 1, 400, F, AGENT, False),
    (Termination.EXITED, 1, 502, F, INFRA, False),  # engine unreachable behind the gateway
    (Termination.EXITED, 1, 503, F, INFRA, False),
    (Termination.EXITED, 1, 504, F, INFRA, False),
    (Termination.CRASHED, None, 200, F, AGENT, False),
    (Termination.TIMED_OUT, None, 200, F, AGENT, False),
    (Termination.TIMED_OUT, None, 502, F, AGENT, False),
    (Termination.OOM_KILLED, None, None, F, AGENT, False),
    (Termination.START_FAILED, None, None, F, INFRA, False),
    (Termination.EVICTED, None, 200, F, INFRA, False),
    (Termination.NODE_LOST, None, None, F, INFRA, False),
    (Termination.CANCELLED, None, None, F, INFRA, False),
])
def test_classify_table(termination, exit_code, last_status, state, kind, graded):
    outcome = classify(result(termination, exit_code), last_status)
    assert (outcome.state, outcome.failure_kind, outcome.graded) == (state, kind, graded)
    assert (outcome.error is None) == (state == S)
    if outcome.error is not None:
        assert "'r1'" in outcome.error


@pytest.mark.parametrize("termination", [Termination.EXITED, Termination.CRASHED, Termination.TIMED_OUT,
                                         Termination.OOM_KILLED])
def test_recipe_may_grade_agent_failures(termination):
    outcome = classify(result(termination, 2), None, grade_agent_failures=True)
    assert (outcome.state, outcome.failure_kind, outcome.graded) == (F, AGENT, True)


def test_infra_failures_are_never_graded_even_when_recipe_grades_failures():
    outcome = classify(result(Termination.EVICTED), None, grade_agent_failures=True)
    assert not outcome.graded


@pytest.mark.parametrize(("attempt", "max_attempts", "state", "kind"), [
    (1, 3, Q, None), (2, 3, Q, None), (3, 3, F, INFRA), (1, 1, F, INFRA), (5, 3, F, INFRA),
])
def test_settle_requeues_infra_while_attempts_remain(attempt, max_attempts, state, kind):
    settled = settle(Outcome(F, INFRA, "boom", graded=False), attempt, max_attempts)
    assert (settled.state, settled.failure_kind) == (state, kind)
    assert "boom" in settled.error and f"{max_attempts}" in settled.error


@given(st.sampled_from(list(Termination)), st.one_of(st.none(), st.integers(-64, 255)),
       st.one_of(st.none(), st.integers(100, 599)), st.booleans(), st.integers(1, 10), st.integers(1, 10))
def test_every_outcome_is_a_valid_patch(termination, exit_code, last_status, grade_failures, attempt, max_attempts):
    outcome = classify(result(termination, exit_code), last_status, grade_agent_failures=grade_failures)
    assert (outcome.failure_kind is not None) == (outcome.state == F)
    assert not (outcome.graded and outcome.failure_kind == INFRA)
    settled = settle(outcome, attempt, max_attempts)
    if outcome.failure_kind == AGENT or outcome.state == S:
        assert settled == outcome
    else:
        assert settled.state == (Q if attempt < max_attempts else F)
        assert (settled.failure_kind is None) == (settled.state == Q)
