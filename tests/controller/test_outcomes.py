"""The outcome table: every termination maps to the documented state, failure kind and grading; retries settle."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controller.outcomes import Outcome, classify, settle
from controller.runners.base import RunResult, Termination
from gateway.records import CallErrorCode, CallRecord, CallStatus, FailureKind, InfraReason, RolloutState

S, F, Q = RolloutState.SUCCEEDED, RolloutState.FAILED, RolloutState.QUEUED
AGENT, INFRA = FailureKind.AGENT, FailureKind.INFRA


def result(termination: Termination, exit_code: int | None = None) -> RunResult:
    return RunResult("r1", 1, termination, exit_code, "detail", 1.0)


def call(http_status: int = 200, code: CallErrorCode | None = None) -> CallRecord:
    """The attempt's last call as the gateway recorded it: its HTTP status and error code."""
    return CallRecord(id=1, rollout_id="r1", attempt=1, seq=0, kind="messages", stream=False, model="policy",
                      upstream="http://engine/v1", status=CallStatus.ERROR if code and http_status != 200
                      else CallStatus.OK, http_status=http_status, error="why" if code else None, error_code=code,
                      request={}, response_raw=None, response_id=None, prompt_token_ids=[1],
                      response_token_ids=[2] if http_status == 200 else [], response_logprobs=[], response_text=None,
                      finish_reason=None, n_choices=1, policy_version=1, latency_ms=1.0, created_at=0.0)


OK = call()
UNAVAILABLE = call(502, CallErrorCode.UPSTREAM_UNAVAILABLE)  # the engine could not be reached
ENGINE_BROKE = call(502, CallErrorCode.UPSTREAM_PROTOCOL_ERROR)  # its answer off the protocol, or a 5xx
STREAM_DROPPED = call(200, CallErrorCode.STREAM_BROKEN)
UNTRANSLATABLE = call(200, CallErrorCode.MODEL_TOOL_ARGUMENTS)  # the model's tool call, answered as text
CONTEXT_FULL = call(400, CallErrorCode.UPSTREAM_ERROR)  # the engine refused: the model's answers filled the context
ERROR_IN_200 = call(502, CallErrorCode.UPSTREAM_ERROR)  # the engine's own error in a 200 body, answered 502
TOO_LONG = call(502, CallErrorCode.UPSTREAM_TIMEOUT)  # the model's answer ran past the gateway's timeout
OLD_502 = call(502)  # recorded by a gateway without error codes: no cause shown
ENGINE_UNREACHABLE = InfraReason.ENGINE_UNREACHABLE


@pytest.mark.parametrize(("termination", "exit_code", "last_call", "state", "kind", "graded", "reason"), [
    (Termination.EXITED, 0, OK, S, None, True, None),
    (Termination.EXITED, 0, UNAVAILABLE, S, None, True, None),  # the harness coped with the error itself
    (Termination.EXITED, 0, None, S, None, True, None),
    (Termination.EXITED, 3, OK, F, AGENT, False, None),
    (Termination.EXITED, 1, None, F, AGENT, False, None),
    (Termination.EXITED, 1, UNAVAILABLE, F, INFRA, False, ENGINE_UNREACHABLE),  # (d) the engine did not answer
    # the engine answered the harness's own request badly: a request can provoke that (n past the gateway's choices)
    (Termination.EXITED, 1, ENGINE_BROKE, F, AGENT, False, None),
    (Termination.EXITED, 1, STREAM_DROPPED, F, AGENT, False, None),
    (Termination.EXITED, 1, UNTRANSLATABLE, F, AGENT, False, None),  # (b) after an answer the model caused
    (Termination.EXITED, 1, CONTEXT_FULL, F, AGENT, False, None),  # (c) after a 4xx
    (Termination.EXITED, 1, ERROR_IN_200, F, AGENT, False, None),
    (Termination.EXITED, 1, TOO_LONG, F, AGENT, False, None),
    (Termination.EXITED, 1, OLD_502, F, AGENT, False, None),
    (Termination.EXITED, 1, 502, F, AGENT, False, None),  # a bare status shows no cause
    (Termination.EXITED, 1, 503, F, AGENT, False, None),
    (Termination.CRASHED, None, OK, F, AGENT, False, None),
    (Termination.TIMED_OUT, None, OK, F, AGENT, False, None),
    (Termination.TIMED_OUT, None, UNAVAILABLE, F, AGENT, False, None),
    (Termination.OOM_KILLED, None, None, F, AGENT, False, None),
    (Termination.START_FAILED, None, None, F, INFRA, False, InfraReason.START_FAILED),
    (Termination.EVICTED, None, OK, F, INFRA, False, InfraReason.EVICTED),
    (Termination.NODE_LOST, None, None, F, INFRA, False, InfraReason.NODE_LOST),
    (Termination.CANCELLED, None, None, F, INFRA, False, InfraReason.CANCELLED),
])
def test_classify_table(termination, exit_code, last_call, state, kind, graded, reason):
    outcome = classify(result(termination, exit_code), last_call)
    assert (outcome.state, outcome.failure_kind, outcome.graded, outcome.reason) == (state, kind, graded, reason)
    assert (outcome.error is None) == (state == S)
    if outcome.error is not None:
        assert "'r1'" in outcome.error


@pytest.mark.parametrize(("last_call", "words"), [(UNAVAILABLE, "502 [upstream_unavailable] (engine unreachable)")])
def test_an_infra_error_names_what_the_last_call_recorded(last_call, words):
    assert words in classify(result(Termination.EXITED, 1), last_call).error


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
    settled = settle(Outcome(F, INFRA, "boom", graded=False, reason=InfraReason.EVICTED), attempt, max_attempts)
    assert (settled.state, settled.failure_kind, settled.reason) == (state, kind, InfraReason.EVICTED)
    assert "boom" in settled.error and f"{max_attempts}" in settled.error


LAST_CALLS = st.one_of(st.none(), st.integers(100, 599), st.builds(
    call, st.sampled_from([200, 400, 413, 429, 500, 502, 503, 504]), st.one_of(st.none(), st.sampled_from(
        list(CallErrorCode)))))


@given(st.sampled_from(list(Termination)), st.one_of(st.none(), st.integers(-64, 255)), LAST_CALLS, st.booleans(),
       st.integers(1, 10), st.integers(1, 10))
def test_every_outcome_is_a_valid_patch(termination, exit_code, last_call, grade_failures, attempt, max_attempts):
    """Every outcome is a valid state change; an infra one always names its reason, kept by `settle`; a harness
    exiting non-zero is infra only after a call that recorded an engine failure."""
    outcome = classify(result(termination, exit_code), last_call, grade_agent_failures=grade_failures)
    assert (outcome.reason is not None) == (outcome.failure_kind == INFRA)
    if termination == Termination.EXITED and outcome.failure_kind == INFRA:
        assert isinstance(last_call, CallRecord) and last_call.error_code in (
            CallErrorCode.UPSTREAM_UNAVAILABLE,)
    assert (outcome.failure_kind is not None) == (outcome.state == F)
    assert not (outcome.graded and outcome.failure_kind == INFRA)
    settled = settle(outcome, attempt, max_attempts)
    if outcome.failure_kind == AGENT or outcome.state == S:
        assert settled == outcome
    else:
        assert settled.state == (Q if attempt < max_attempts else F)
        assert (settled.failure_kind is None) == (settled.state == Q)
        assert settled.reason == outcome.reason
