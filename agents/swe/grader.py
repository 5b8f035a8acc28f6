"""The SWE grader: the agent's final diff (its repository copy vs a fresh buggy checkout), applied to another FRESH
checkout at the task's base with test files restored, then FAIL_TO_PASS and PASS_TO_PASS run with pytest (sandboxed).

Resolved (reward 1.0) iff every FAIL_TO_PASS test passes and every PASS_TO_PASS test passes or is skipped; a skipped
FAIL_TO_PASS test counts as a failure (SWE-bench's rule). Otherwise the reward is 0.0. Nothing the harness says is used.
The details carry the agent's diff as `model_patch` (a SWE-bench prediction's field): evaluations read it from the
reward event.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agents.swe.diffs import apply_patch, copy_tree, matches_any, split_patch, tree_diff
from agents.swe.generator import TEST_CONFIG_FILES, TEST_PATTERNS, base_path
from agents.swe.testrun import TestRun, run_tests
from controller.recipe import Grade

# Changes to these files are dropped before grading: the tests, conftest files and test configuration stay the base's.
PROTECTED_PATTERNS = TEST_PATTERNS + TEST_CONFIG_FILES
# The grade details carry the agent's diff (SWE-bench's `model_patch`) up to this size; a larger one is left out (the
# reward is posted to the gateway with the details, whose request body limit is 32 MiB by default).
MAX_MODEL_PATCH_CHARS = 1_000_000


@dataclass(frozen=True)
class FilteredPatch:
    """The agent's diff split into what is graded and what is restored."""

    graded: str  # the diff applied before the tests run
    restored: tuple[str, ...]  # protected files the agent changed (their changes are dropped)
    binary: tuple[str, ...]  # binary files the agent changed (not applied)


def checkout(store: Path, instance: dict[str, Any], destination: Path) -> Path:
    """A fresh copy of the instance's repository at its base with the bug applied (what the agent starts from)."""
    copy_tree(base_path(store, instance), destination)
    apply_patch(destination, instance["patch"])
    return destination


def filter_patch(patch: str) -> FilteredPatch:
    """Drop the changes to protected files and binary files from a multi-file diff."""
    graded, restored, binary = [], [], []
    for path, chunk in split_patch(patch).items():
        if matches_any(path, PROTECTED_PATTERNS):
            restored.append(path)
        elif "\n@@ " not in chunk:
            binary.append(path)
        else:
            graded.append(chunk)
    return FilteredPatch(graded="".join(graded), restored=tuple(restored), binary=tuple(binary))


def is_resolved(run: TestRun, fail_to_pass: list[str], pass_to_pass: list[str]) -> tuple[bool, dict[str, list[str]]]:
    """SWE-bench's rule, with the tests that broke it."""
    f2p_failed = [t for t in fail_to_pass if run.outcomes.get(t) != "passed"]
    p2p_failed = [t for t in pass_to_pass if run.outcomes.get(t) not in ("passed", "skipped")]
    return not f2p_failed and not p2p_failed, {"fail_to_pass_failed": f2p_failed, "pass_to_pass_failed": p2p_failed}


def agent_patch(store: Path, instance: dict[str, Any], agent_repo: Path) -> str:
    """The agent's final diff: its repository copy against a fresh buggy checkout."""
    with tempfile.TemporaryDirectory(prefix="harnessrl-swe-diffbase-") as scratch:
        return tree_diff(checkout(store, instance, Path(scratch) / "repo"), agent_repo)


def grade_patch(store: Path, instance: dict[str, Any], patch: str, *, timeout_s: float = 600.0) -> Grade:
    """Grade a diff against the buggy checkout of `instance` in a fresh copy."""
    filtered = filter_patch(patch)
    details: dict[str, Any] = {"instance_id": instance["instance_id"], "patch_chars": len(patch),
                               "model_patch": patch if len(patch) <= MAX_MODEL_PATCH_CHARS else None,
                               "restored_files": list(filtered.restored), "binary_files": list(filtered.binary)}
    with tempfile.TemporaryDirectory(prefix="harnessrl-swe-grade-") as scratch:
        fresh = checkout(store, instance, Path(scratch) / "repo")
        try:
            apply_patch(fresh, filtered.graded)
        except ValueError as error:
            return Grade(reward=0.0, details={**details, "resolved": False, "patch_error": str(error)})
        tests = instance["FAIL_TO_PASS"] + instance["PASS_TO_PASS"]
        run = run_tests(fresh, tests, timeout_s=timeout_s)
    resolved, broken = is_resolved(run, instance["FAIL_TO_PASS"], instance["PASS_TO_PASS"])
    details |= {"resolved": resolved, **broken, "pytest_returncode": run.returncode}
    if not resolved:
        details["pytest_tail"] = run.output_tail
    return Grade(reward=1.0 if resolved else 0.0, details=details)


def grade_workdir(store: Path, instance: dict[str, Any], agent_repo: Path) -> Grade:
    """Grade the agent's repository copy (its diff is computed here, never taken from the harness)."""
    if not agent_repo.is_dir():
        return Grade(reward=0.0, details={"instance_id": instance["instance_id"], "resolved": False,
                                          "error": f"the agent's repository {agent_repo} is missing"})
    return grade_patch(store, instance, agent_patch(store, instance, agent_repo))
