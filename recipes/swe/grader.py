"""The SWE grader: the agent's final diff (its repository copy vs a fresh buggy checkout, taken in a sandbox of its
own: `agent_diff`; a `repo/` that is a link is `tamper`, never followed), judged by the task's
patch policy (`patch_policy`), the allowed part applied to another FRESH checkout of the task's base (no .git, no
gold), then FAIL_TO_PASS and PASS_TO_PASS run with pytest isolated in the hardened sandbox as another user, with
neither the task store nor the grader's code in it (`testrun`).

Resolved (reward 1.0) iff every FAIL_TO_PASS test passes and every PASS_TO_PASS test passes or is skipped; a skipped
FAIL_TO_PASS test counts as a failure (SWE-bench's rule). Otherwise the reward is 0.0. Nothing the harness says is used.
An attempt whose diff changes what decides its grade, or whose test run's outcomes, exit status and sentinel disagree,
is flagged `tamper: true` with `tamper_reasons` and gets 0; so is an unresolved one whose tests, run again in
pytest's own process, show a forgery there (`forgery_probe`: across the boundary a forgery reaches nothing). The
details carry the agent's diff as `model_patch` (a SWE-bench prediction's field): evaluations read it from the reward
event.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from controller.recipe import Grade
from recipes.swe.agent_diff import AgentDiffError, agent_diff
from recipes.swe.diffs import apply_patch, copy_tree, tree_files
from recipes.swe.forgery_probe import probe_details, probe_failed, probed_tests, wants_probe
from recipes.swe.generator import base_path
from recipes.swe.patch_policy import DEFAULT_POLICY, PatchPolicy, review_patch
from recipes.swe.testrun import TestRun, run_tests

# The grade details carry the agent's diff (SWE-bench's `model_patch`) up to this size; a larger one is left out (the
# reward is posted to the gateway with the details, whose request body limit is 32 MiB by default).
MAX_MODEL_PATCH_CHARS = 1_000_000


def checkout(store: Path, instance: dict[str, Any], destination: Path) -> Path:
    """A fresh copy of the instance's repository at its base with the bug applied (what the agent starts from)."""
    copy_tree(base_path(store, instance), destination)
    apply_patch(destination, instance["patch"])
    return destination


def is_resolved(run: TestRun, fail_to_pass: list[str], pass_to_pass: list[str]) -> tuple[bool, dict[str, list[str]]]:
    """SWE-bench's rule, with the tests that broke it."""
    f2p_failed = [t for t in fail_to_pass if run.outcomes.get(t) != "passed"]
    p2p_failed = [t for t in pass_to_pass if run.outcomes.get(t) not in ("passed", "skipped")]
    return not f2p_failed and not p2p_failed, {"fail_to_pass_failed": f2p_failed, "pass_to_pass_failed": p2p_failed}


def agent_patch(store: Path, instance: dict[str, Any], agent_repo: Path) -> str:
    """The agent's final diff: its repository copy against a fresh buggy checkout, taken in a sandbox of its own
    (`agent_diff`; AgentDiffError when the tree cannot be diffed within its limits)."""
    with tempfile.TemporaryDirectory(prefix="harnessrl-swe-diffbase-") as scratch:
        return agent_diff(checkout(store, instance, Path(scratch) / "repo"), agent_repo)


def grade_patch(store: Path, instance: dict[str, Any], patch: str, *, timeout_s: float = 600.0,
                policy: PatchPolicy = DEFAULT_POLICY, forgery_probe: bool = True) -> Grade:
    """Grade a diff against the buggy checkout of `instance` in a fresh copy, restricted to what `policy` allows;
    `forgery_probe`: an unresolved verdict's failing tests run again in pytest's own process, where a forgery shows as
    `tamper` (`forgery_probe`)."""
    details: dict[str, Any] = {"instance_id": instance["instance_id"], "patch_chars": len(patch),
                               "model_patch": patch if len(patch) <= MAX_MODEL_PATCH_CHARS else None,
                               "resolved": False, "tamper": False}
    with tempfile.TemporaryDirectory(prefix="harnessrl-swe-grade-") as scratch:
        fresh = Path(scratch) / "repo"
        if (nothing_to_run := graded_checkout(store, instance, patch, policy, details, fresh)) is not None:
            return nothing_to_run
        tests, watched = instance["FAIL_TO_PASS"] + instance["PASS_TO_PASS"], details["graded_files"]
        run = run_tests(fresh, tests, timeout_s=timeout_s, watched=watched)  # the store is not in the sandbox
        if run.problem or run.timed_out:
            return Grade(reward=0.0, details={**details, **run_details(run)})
        grade = _graded(run, instance, details)
        if forgery_probe and wants_probe(grade.details):  # the canary rounds ran on copies: `fresh` is as applied
            probe = _probe(fresh, probed_tests(grade.details), timeout_s, watched)
            grade = Grade(reward=0.0, details={**grade.details, **probe})
    return grade


def _probe(fresh: Path, tests: list[str], timeout_s: float, watched: list[str]) -> dict[str, Any]:
    """The forgery probe's run (`forgery_probe`); one that could not run (its sandbox, or anything the tested code
    made it raise) leaves it without a finding: never the grade's infra or error."""
    try:
        return probe_details(run_tests(fresh, tests, timeout_s=timeout_s, watched=watched, boundary=False))
    except Exception as error:  # noqa: BLE001 - the probe only ever adds a finding; the verdict stands without it
        return probe_failed(error)


def graded_checkout(store: Path, instance: dict[str, Any], patch: str, policy: PatchPolicy, details: dict[str, Any],
                    destination: Path) -> Grade | None:
    """A fresh checkout at `destination` with only the part of `patch` that `policy` allows applied; or the grade (0)
    when there is nothing to run (a tampered or unappliable diff, or nothing graded: the buggy checkout itself, which
    fails its FAIL_TO_PASS tests by construction, so its tests are not run, as SWE-bench does not run an empty
    patch). `details` gets the policy's findings."""
    fresh = checkout(store, instance, destination)
    review = review_patch(patch, frozenset(tree_files(fresh)), policy)
    details |= {"graded_files": list(review.graded_files), "dropped_files": list(review.dropped)}
    if review.tampered:
        reasons = [f"{v.path}: {v.reason}" for v in review.violations]
        return Grade(reward=0.0, details={**details, "tamper": True, "tamper_reasons": reasons})
    if not review.graded_files:
        return Grade(reward=0.0, details={**details, "empty_patch": True})
    try:
        apply_patch(fresh, review.graded)
    except ValueError as error:
        return Grade(reward=0.0, details={**details, "patch_error": str(error)})
    return None


def run_details(run: TestRun) -> dict[str, Any]:
    """Why a run does not count: outcomes that cannot be believed (tamper) or the time limit."""
    details: dict[str, Any] = {"pytest_returncode": run.returncode, "pytest_tail": run.output_tail}
    if run.problem is not None:
        details |= {"tamper": True, "tamper_reasons": [run.problem]}
    if run.timed_out:
        details["timed_out"] = True
    return details


def _graded(run: TestRun, instance: dict[str, Any], details: dict[str, Any]) -> Grade:
    resolved, broken = is_resolved(run, instance["FAIL_TO_PASS"], instance["PASS_TO_PASS"])
    details |= {"resolved": resolved, **broken, "pytest_returncode": run.returncode}
    if not resolved:
        details["pytest_tail"] = run.output_tail
    return Grade(reward=1.0 if resolved else 0.0, details=details)


def repo_problem(instance: dict[str, Any], agent_repo: Path) -> Grade | None:
    """Reward 0 when the agent's repository is not a real directory: a link (`tamper`, never followed) or missing."""
    base = {"instance_id": instance["instance_id"], "resolved": False}
    if agent_repo.is_symlink():
        reason = f"{agent_repo.name}/ is a link (to {os.readlink(agent_repo)[:200]!r}); it is never followed"
        return Grade(reward=0.0, details={**base, "tamper": True, "tamper_reasons": [reason]})
    if not agent_repo.is_dir():
        return Grade(reward=0.0, details={**base, "error": f"the agent's repository {agent_repo.name}/ is missing"})
    return None


def grade_workdir(store: Path, instance: dict[str, Any], agent_repo: Path) -> Grade:
    """Grade the agent's repository copy (its diff is computed here, never taken from the harness)."""
    if (problem := repo_problem(instance, agent_repo)) is not None:
        return problem
    try:
        patch = agent_patch(store, instance, agent_repo)
    except AgentDiffError as error:
        return Grade(reward=0.0, details={"instance_id": instance["instance_id"], "resolved": False,
                                          "error": str(error)})
    return grade_patch(store, instance, patch)
