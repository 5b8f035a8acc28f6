"""Report an ended attempt: classify it, grade it in this process, post the reward as the grader, set the state.

What the policy left is hostile input: the working directory is surveyed first (no link followed, caps checked before
any content is read; `sandbox.hostile_tree`), a grader's exception is the agent's failure unless it is the grader's
own infrastructure (`GraderInfraError`, `SandboxError`), and the details are made safe before they are posted
(`reward_details`), so no content the agent controls can turn its attempt into an infrastructure failure.

Before it reads the attempt's calls the controller closes them (a lease renewal with `close_calls`): the gateway records
no later call of the attempt (a request the harness sent before it ended, answered during grading), so the calls the
grader sees are exactly the ones the trainer trains. Every write names the attempt and this controller's lease, so the
gateway refuses it (409) once the attempt is no longer current or the lease was lost; nothing is then reported.
"""

from __future__ import annotations

import logging
import math

from controller.attempt import Attempt
from controller.outcomes import Outcome, classify, settle
from controller.recipe import Grade, GradeInput, GraderInfraError
from controller.reward_details import safe_details, safe_text
from controller.runners.base import RunResult
from gateway.client import GatewayAPIError
from gateway.client_roles import LeaseClient
from gateway.records import FailureKind, InfraReason, RolloutState
from sandbox import SandboxError
from sandbox.hostile_tree import TreeLimits, TreeProblem, survey_tree

log = logging.getLogger("harnessrl.controller")
GRADER_INFRA_ERRORS = (GraderInfraError, SandboxError)  # what a grader may fail on without the policy's doing


def report_attempt(attempt: Attempt, result: RunResult, admin: LeaseClient, grader: LeaseClient,
                   controller_id: str, lease_s: float = 60.0) -> Outcome | None:
    """The outcome set on the rollout, or None when the rollout is no longer this controller's attempt. The attempt's
    calls are closed first (renewing the lease for `lease_s`): what is read next is what is graded and trained."""
    rollout_id, number = attempt.rollout.id, attempt.rollout.attempt
    current = admin.get_rollout(rollout_id)
    if current.state != RolloutState.RUNNING or current.attempt != number or current.lease_owner != controller_id:
        log.warning("rollout %s attempt %s is no longer ours (state %s, attempt %s, lease %s); not reported",
                    rollout_id, number, current.state, current.attempt, current.lease_owner)
        return None
    try:
        admin.renew_lease(rollout_id, controller_id, lease_s, close_calls=True)
    except GatewayAPIError as exc:
        if exc.status != 409:
            raise
        log.warning("rollout %s attempt %s is no longer ours (%s); not reported", rollout_id, number, exc)
        return None
    calls = admin.calls(rollout_id, attempt=number)
    outcome = classify(result, calls[-1] if calls else None,
                       grade_agent_failures=getattr(attempt.recipe, "grade_agent_failures", False))
    retryable = True
    if outcome.graded:
        outcome, retryable = _grade(attempt, result, calls, grader, outcome, controller_id)
    elif outcome.failure_kind == FailureKind.AGENT:
        _post(grader, attempt, ungraded_failure(attempt.recipe, outcome), controller_id)
    final = settle(outcome, number, attempt.rollout.max_attempts) if retryable else outcome
    admin.set_state(rollout_id, final.state, final.failure_kind, final.error, attempt=number,
                    controller_id=controller_id, reason=final.reason)
    log.info("rollout %s attempt %s: %s %s", rollout_id, number, final.state, final.error or "")
    return final


def _grade(attempt: Attempt, result: RunResult, calls: list, grader: LeaseClient, outcome: Outcome,
           controller_id: str) -> tuple[Outcome, bool]:
    """Survey the working directory, run the grader and post its reward: (outcome, retryable). A refused tree or a
    grader that raises on what the agent left is the agent's failure (the recipe's `failure_reward` posted, default
    0); a GraderInfraError or a sandbox that cannot be built fails the rollout as infra, not retried."""
    rollout_id, recipe = attempt.rollout.id, attempt.recipe
    survey = survey_tree(attempt.spec.workdir, getattr(recipe, "tree_limits", TreeLimits()))
    bottom = failure_reward(recipe)
    if survey.problem is not None:
        grade, error = refused_grade(survey.problem, bottom)
        _post(grader, attempt, grade, controller_id)
        return Outcome(RolloutState.FAILED, FailureKind.AGENT, f"{_where(attempt)}: {error}", graded=True), True
    graded = GradeInput(task=dict(attempt.rollout.input), workdir=attempt.spec.workdir, calls=calls,
                        exit_code=result.exit_code)
    try:
        grade = recipe.grade(graded)
    except GRADER_INFRA_ERRORS as exc:
        log.exception("grader of recipe %s failed on its own infrastructure for rollout %s", recipe.name, rollout_id)
        return Outcome(RolloutState.FAILED, FailureKind.INFRA,
                       f"grader of recipe {recipe.name!r} failed: {type(exc).__name__}: {exc}; fix what it names "
                       "(the harness is not re-run for a grader error)", graded=False,
                       reason=InfraReason.GRADER_CRASHED), False
    except Exception as exc:  # noqa: BLE001 - a grader crash on what the agent left is the agent's failure
        log.warning("grader of recipe %s raised on rollout %s: %s: %s", recipe.name, rollout_id,
                    type(exc).__name__, safe_text(str(exc), 500))
        error = f"the grader raised {type(exc).__name__} on what the attempt left: {safe_text(str(exc), 2000)}"
        _post(grader, attempt, Grade(bottom, {"error": error, "grader_error": type(exc).__name__}), controller_id)
        return Outcome(RolloutState.FAILED, FailureKind.AGENT, f"{_where(attempt)}: {error}", graded=True), True
    _post(grader, attempt, grade, controller_id)
    return outcome, True


def ungraded_failure(recipe: object, outcome: Outcome) -> Grade:
    """The grade of an agent failure the grader does not see (a harness that exited non-zero, crashed or ran into its
    timeout; `grade_agent_failures` off): the recipe's `failure_reward`, the bottom of its scale, so a harness that
    fails never scores above a wrong answer, on any scale (a file recipe's `reward_range: [-1, 1]`), and every agent
    failure carries its reward in the store for the trainer, the metrics and the traces alike."""
    return Grade(failure_reward(recipe), {"error": safe_text(outcome.error or "", 2000), "graded": False})


def failure_reward(recipe: object) -> float:
    """The reward of an attempt that failed as the agent's (its tree refused, its grader failing on what the agent left,
    its harness failing before any grade): the recipe's
    optional `failure_reward` (the bottom of its grader's scale, so breaking the grader never beats a verdict),
    default 0.0."""
    value = getattr(recipe, "failure_reward", 0.0)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise TypeError(f"recipe {getattr(recipe, 'name', recipe)!r}: failure_reward must be a finite number, got "
                        f"{value!r}")
    return float(value)


def refused_grade(problem: TreeProblem, reward: float = 0.0) -> tuple[Grade, str]:
    """The failure reward (default 0) for a working directory refused before grading, with the reason (and `tamper`
    for a way out)."""
    if problem.kind == "tamper":
        return (Grade(reward, {"resolved": False, "tamper": True, "tamper_reasons": [problem.reason]}),
                f"tamper: {problem.reason}")
    details = {"resolved": False, "error": problem.reason, **({"cap": problem.cap} if problem.cap else {})}
    return Grade(reward, details), f"working directory refused: {problem.reason}"


def _where(attempt: Attempt) -> str:
    return f"attempt {attempt.rollout.attempt} of {attempt.rollout.id!r}"


def _post(grader: LeaseClient, attempt: Attempt, grade: Grade, controller_id: str) -> None:
    """Post the reward with its details made safe (`reward_details`); details the gateway still refuses (4xx) are
    replaced by a note, so the reward itself always lands. A gateway that cannot be reached raises (infra)."""
    rollout_id, number = attempt.rollout.id, attempt.rollout.attempt
    details = safe_details(grade.details)
    try:
        grader.post_reward(rollout_id, grade.reward, details, attempt=number, controller_id=controller_id)
    except GatewayAPIError as exc:
        if exc.status >= 500 or exc.status == 409:
            raise
        log.warning("the gateway refused the details of rollout %s's reward (%s); posting the reward without them",
                    rollout_id, exc.status)
        kept = {key: details[key] for key in ("resolved", "tamper") if key in details}
        note = {**kept, "details_refused": safe_text(f"{exc.status}: {exc}", 2000)}
        grader.post_reward(rollout_id, grade.reward, note, attempt=number, controller_id=controller_id)
