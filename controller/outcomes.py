"""Outcome classification as data: how an attempt ended -> the rollout's next state, failure kind and error.

| termination  | exit / last call                                   | state     | kind  | graded                  |
|--------------|----------------------------------------------------|-----------|-------|-------------------------|
| exited       | 0                                                  | succeeded | -     | yes                     |
| exited       | != 0, last call recorded an engine failure (below) | failed    | infra | no (retried)            |
| exited       | != 0, anything else                                | failed    | agent | only if the recipe asks |
| crashed      | -                                                  | failed    | agent | only if the recipe asks |
| timed_out    | -                                                  | failed    | agent | only if the recipe asks |
| oom_killed   | -                                                  | failed    | agent | only if the recipe asks |
| start_failed | -                                                  | failed    | infra | no                      |
| evicted      | -                                                  | failed    | infra | no                      |
| node_lost    | -                                                  | failed    | infra | no                      |
| cancelled    | -                                                  | failed    | infra | no                      |

Infra is only what the policy cannot cause. A harness exiting non-zero is infra only when the attempt's last call
shows the engine could not be reached, as the gateway recorded it (`CallRecord.error_code` in `ENGINE_FAILURES`:
no answer at all, after the gateway's retries). After anything else, whatever its HTTP status, it is the agent's
failure: an answer the model wrote that the harness could not use, a context the model's answers filled (a 4xx), an
answer longer than the gateway's timeout, a 429 quota, a 502 recorded without a code (an older gateway), and also an
engine that answered off the protocol, with a 5xx or with a stream that broke: the harness chose that request (its
`n`, its limits, its tools), and an answer the request can provoke is a retry the policy could farm (ambiguous
failures are the agent's; a genuinely broken engine then shows as reward 0 everywhere, with the code in each call).
Each infra outcome carries its `InfraReason`, which the state change records (the infra rate per cause).

An `agent` failure is final and counts as the agent's result: the grader runs only if the recipe sets
`grade_agent_failures = True` (its reward is then posted before the state changes); otherwise the recipe's
`failure_reward` (the bottom of its scale, default 0) is posted (`report.ungraded_failure`), so a harness that fails
never scores above a wrong answer.
An `infra` failure is retried: `settle` turns it into a requeue (running -> queued) while attempts remain.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from controller.runners.base import RunResult, Termination
from gateway.records import CallErrorCode, CallRecord, FailureKind, InfraReason, RolloutState

ENGINE_FAILURES: dict[CallErrorCode, InfraReason] = {
    CallErrorCode.UPSTREAM_UNAVAILABLE: InfraReason.ENGINE_UNREACHABLE,
}
"""The recorded call errors the policy cannot cause, and the reason a harness giving up after one of them is given."""
INFRA_TERMINATIONS: dict[Termination, InfraReason] = {
    Termination.START_FAILED: InfraReason.START_FAILED,
    Termination.EVICTED: InfraReason.EVICTED,
    Termination.NODE_LOST: InfraReason.NODE_LOST,
    Termination.CANCELLED: InfraReason.CANCELLED,
}
"""The terminations the policy cannot cause; any other (exited, crashed, timed out, over a memory or disk limit of
its own, or one added later) is the agent's."""
ENGINE_FAILED = {InfraReason.ENGINE_UNREACHABLE: "engine unreachable"}


@dataclass(frozen=True)
class Outcome:
    """What the controller reports for one ended attempt (before retries are decided)."""

    state: RolloutState  # SUCCEEDED or FAILED
    failure_kind: FailureKind | None  # set when state is FAILED
    error: str | None  # why it failed, for humans
    graded: bool  # whether the recipe's grader runs and its reward is posted
    reason: InfraReason | None = None  # why an infra failure happened (set on every infra outcome classify makes)


def engine_failure(last_call: CallRecord | int | None) -> InfraReason | None:
    """The reason when the attempt's last call recorded an engine failure (`ENGINE_FAILURES`), else None. A bare
    HTTP status (what callers passed before the call record) shows no cause: None."""
    if isinstance(last_call, CallRecord) and last_call.error_code is not None:
        return ENGINE_FAILURES.get(last_call.error_code)
    return None


def classify(result: RunResult, last_call: CallRecord | int | None = None, *,
             grade_agent_failures: bool = False) -> Outcome:
    """The outcome of an ended attempt; `last_call` is the attempt's last recorded call (None: it made none)."""
    where = f"attempt {result.attempt} of {result.rollout_id!r}"
    if result.termination == Termination.EXITED and result.exit_code == 0:
        return Outcome(RolloutState.SUCCEEDED, None, None, graded=True)
    engine = engine_failure(last_call) if result.termination == Termination.EXITED else None
    if engine is not None:
        assert isinstance(last_call, CallRecord)
        error = (f"{where}: harness {result.detail} after the gateway answered {last_call.http_status} "
                 f"[{last_call.error_code}] ({ENGINE_FAILED[engine]})")
        return Outcome(RolloutState.FAILED, FailureKind.INFRA, error, graded=False, reason=engine)
    reason = INFRA_TERMINATIONS.get(result.termination)
    if reason is None:  # the harness's own end (any termination not listed as infra: the policy may have caused it)
        error = f"{where}: harness {result.termination}: {result.detail}"
        return Outcome(RolloutState.FAILED, FailureKind.AGENT, error, graded=grade_agent_failures)
    error = f"{where}: infrastructure failure ({result.termination}): {result.detail}"
    return Outcome(RolloutState.FAILED, FailureKind.INFRA, error, graded=False, reason=reason)


def settle(outcome: Outcome, attempt: int, max_attempts: int) -> Outcome:
    """Turn an infra failure into a requeue while attempts remain (its reason kept); other outcomes are final as they
    are."""
    if outcome.failure_kind != FailureKind.INFRA:
        return outcome
    if attempt < max_attempts:
        return replace(outcome, state=RolloutState.QUEUED, failure_kind=None, graded=False,
                       error=f"{outcome.error}; requeued ({attempt}/{max_attempts} attempts used)")
    return replace(outcome, state=RolloutState.FAILED, failure_kind=FailureKind.INFRA, graded=False,
                   error=f"{outcome.error}; all {max_attempts} attempts used")
