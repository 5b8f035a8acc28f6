"""Report an ended attempt: classify it, grade it in this process, post the reward as the grader, set the state.

Both writes name the attempt and this controller's lease, so the gateway refuses them (409) once the attempt is no
longer current or the lease was lost; nothing is then reported.
"""

from __future__ import annotations

import logging

from controller.attempt import Attempt
from controller.outcomes import Outcome, classify, settle
from controller.recipe import GradeInput
from controller.runners.base import RunResult
from gateway.client import GatewayClient
from gateway.records import FailureKind, RolloutState

log = logging.getLogger("harnessrl.controller")


def report_attempt(attempt: Attempt, result: RunResult, admin: GatewayClient, grader: GatewayClient,
                   controller_id: str) -> Outcome | None:
    """The outcome set on the rollout, or None when the rollout is no longer this controller's attempt."""
    rollout_id, number = attempt.rollout.id, attempt.rollout.attempt
    current = admin.get_rollout(rollout_id)
    if current.state != RolloutState.RUNNING or current.attempt != number or current.lease_owner != controller_id:
        log.warning("rollout %s attempt %s is no longer ours (state %s, attempt %s, lease %s); not reported",
                    rollout_id, number, current.state, current.attempt, current.lease_owner)
        return None
    calls = admin.calls(rollout_id, attempt=number)
    outcome = classify(result, calls[-1].http_status if calls else None,
                       grade_agent_failures=getattr(attempt.recipe, "grade_agent_failures", False))
    retryable = True
    if outcome.graded:
        outcome, retryable = _grade(attempt, result, calls, grader, outcome, controller_id)
    final = settle(outcome, number, attempt.rollout.max_attempts) if retryable else outcome
    admin.set_state(rollout_id, final.state, final.failure_kind, final.error, attempt=number,
                    controller_id=controller_id)
    log.info("rollout %s attempt %s: %s %s", rollout_id, number, final.state, final.error or "")
    return final


def _grade(attempt: Attempt, result: RunResult, calls: list, grader: GatewayClient, outcome: Outcome,
           controller_id: str) -> tuple[Outcome, bool]:
    """Run the grader and post its reward; a grader that raises fails the rollout, not retried: (outcome, retryable)."""
    graded = GradeInput(task=dict(attempt.spec.task), workdir=attempt.spec.workdir, calls=calls,
                        exit_code=result.exit_code)
    try:
        grade = attempt.recipe.grade(graded)
    except Exception as exc:  # noqa: BLE001 - any grader bug becomes a failed rollout, not a dead controller
        log.exception("grader of recipe %s raised on rollout %s", attempt.recipe.name, attempt.rollout.id)
        return Outcome(RolloutState.FAILED, FailureKind.INFRA,
                       f"grader of recipe {attempt.recipe.name!r} raised {type(exc).__name__}: {exc}; "
                       "fix the grader (the harness is not re-run for a grader error)", graded=False), False
    grader.post_reward(attempt.rollout.id, grade.reward, grade.details, attempt=attempt.rollout.attempt,
                       controller_id=controller_id)
    return outcome, True
