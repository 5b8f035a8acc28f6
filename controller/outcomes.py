"""Outcome classification as data: how an attempt ended -> the rollout's next state, failure kind and error.

| termination  | exit / last call                 | state     | kind  | graded                         |
|--------------|----------------------------------|-----------|-------|--------------------------------|
| exited       | 0                                | succeeded | -     | yes                            |
| exited       | != 0, last call 502/503/504      | failed    | infra | no (engine unreachable: retry) |
| exited       | != 0                             | failed    | agent | only if the recipe asks        |
| crashed      | -                                | failed    | agent | only if the recipe asks        |
| timed_out    | -                                | failed    | agent | only if the recipe asks        |
| oom_killed   | -                                | failed    | agent | only if the recipe asks        |
| start_failed | -                                | failed    | infra | no                             |
| evicted      | -                                | failed    | infra | no                             |
| node_lost    | -                                | failed    | infra | no                             |
| cancelled    | -                                | failed    | infra | no                             |

An `agent` failure is final and counts as the agent's result; no reward is posted unless the recipe sets
`grade_agent_failures = True` (then the grader runs and its reward is posted before the state changes).
An `infra` failure is retried: `settle` turns it into a requeue (running -> queued) while attempts remain.
"""

from __future__ import annotations

from dataclasses import dataclass

from controller.runners.base import RunResult, Termination
from gateway.records import FailureKind, RolloutState

ENGINE_UNREACHABLE_STATUSES = frozenset({502, 503, 504})
AGENT_TERMINATIONS = frozenset({Termination.EXITED, Termination.CRASHED, Termination.TIMED_OUT,
                                Termination.OOM_KILLED})


@dataclass(frozen=True)
class Outcome:
    """What the controller reports for one ended attempt (before retries are decided)."""

    state: RolloutState  # SUCCEEDED or FAILED
    failure_kind: FailureKind | None  # set when state is FAILED
    error: str | None  # why it failed, for humans
    graded: bool  # whether the recipe's grader runs and its reward is posted


def classify(result: RunResult, last_call_http_status: int | None, *, grade_agent_failures: bool = False) -> Outcome:
    """The outcome of an ended attempt; `last_call_http_status` is the status of the attempt's last call (if any)."""
    where = f"attempt {result.attempt} of {result.rollout_id!r}"
    if result.termination == Termination.EXITED and result.exit_code == 0:
        return Outcome(RolloutState.SUCCEEDED, None, None, graded=True)
    if result.termination == Termination.EXITED and last_call_http_status in ENGINE_UNREACHABLE_STATUSES:
        error = (f"{where}: harness {result.detail} after the gateway answered {last_call_http_status} "
                 "(engine unreachable)")
        return Outcome(RolloutState.FAILED, FailureKind.INFRA, error, graded=False)
    if result.termination in AGENT_TERMINATIONS:
        error = f"{where}: harness {result.termination}: {result.detail}"
        return Outcome(RolloutState.FAILED, FailureKind.AGENT, error, graded=grade_agent_failures)
    error = f"{where}: infrastructure failure ({result.termination}): {result.detail}"
    return Outcome(RolloutState.FAILED, FailureKind.INFRA, error, graded=False)


def settle(outcome: Outcome, attempt: int, max_attempts: int) -> Outcome:
    """Turn an infra failure into a requeue while attempts remain; other outcomes are final as they are."""
    if outcome.failure_kind != FailureKind.INFRA:
        return outcome
    if attempt < max_attempts:
        return Outcome(RolloutState.QUEUED, None, f"{outcome.error}; requeued ({attempt}/{max_attempts} attempts used)",
                       graded=False)
    return Outcome(RolloutState.FAILED, FailureKind.INFRA, f"{outcome.error}; all {max_attempts} attempts used",
                   graded=False)
