"""The `swe` recipe graded in a Kubernetes Job per rollout: what the shipped manifests use, since their non-root
controller pod (RuntimeDefault seccomp, no capabilities) cannot build the bubblewrap sandbox `testrun` needs.

The controller (trusted, with the store) does what needs the store: the agent's diff against a fresh buggy checkout,
the patch policy (a tampered diff is graded 0 with `tamper` and no Job), the allowed part applied to another fresh
checkout, which is packed with the grader's runner files (`grading_job.pack_grading_input`). A grading pod
(`grading_job_pod`) runs the tests in canary rounds and prints one verdict line; `read_verdict` holds each round to
the same rules as a local run (one outcomes document, the sentinel pair, the exit status agreeing), the rounds to the
canaries' (`testrun.merge_rounds`: a canary not reported failed is tamper), and the line to the nonce the pod got in
its environment (a line without rounds, from an image older than the canaries, is judged as one plain run).
An unresolved verdict's failing tests run again in a second Job on the same input without the boundary's files
(`grading_job.probe_input`), where a forgery shows as `tamper` (`forgery_probe`; no verdict there adds nothing).
A Job that cannot run, an input over a Secret's limit or an API error is `GradingInfraError` (the rollout
fails as infra); a pod that ends without a verdict (its memory limit, a crash) is reward 0 with the `error`.

Chosen per runner, as the `swe_bench` recipe finds its cluster: $HARNESSRL_SWE_CONTROLLER_CONFIG names the
controller's config; with `runner: kubernetes` there, grading Jobs use its `kubernetes` settings (namespace, image,
CPU and memory); unset or `runner: local`, the `swe` recipe grades locally under bubblewrap.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from controller.config import KubernetesSettings, load_controller_config
from controller.recipe import Grade
from recipes.swe.agent_diff import AgentDiffError
from recipes.swe.canaries import Role
from recipes.swe.forgery_probe import probe_details, probe_failed, probed_tests, wants_probe
from recipes.swe.grader import (
    MAX_MODEL_PATCH_CHARS,
    agent_patch,
    checkout,
    graded_checkout,
    is_resolved,
    repo_problem,
    run_details,
)
from recipes.swe.grading_job import (
    GradingInputTooLarge,
    build_swe_grading_job,
    build_swe_grading_secret,
    grading_name,
    new_nonce,
    pack_grading_input,
    probe_input,
)
from recipes.swe.grading_job_pod import VERDICT_PREFIX
from recipes.swe.kube_grading import GradingInfraError, KubeJobRunner
from recipes.swe.outcome_check import disagreement, parse_document, rewritten, split_sentinel
from recipes.swe.patch_policy import DEFAULT_POLICY, PatchPolicy
from recipes.swe.process_boundary import UNAVAILABLE_EXIT
from recipes.swe.testrun import TestRun, merge_rounds
from recipes.swe.verdict_guard import TAMPER_EXIT

CONFIG_ENV = "HARNESSRL_SWE_CONTROLLER_CONFIG"
LOG_TAIL_CHARS = 2000


class NoVerdict(ValueError):
    """The grading pod's log has no verdict line (the pod ended before it could write one)."""


def job_settings_from_env() -> KubernetesSettings | None:
    """The grading Jobs' settings when $HARNESSRL_SWE_CONTROLLER_CONFIG names a config with `runner: kubernetes`."""
    path = os.environ.get(CONFIG_ENV)
    if not path:
        return None
    config = load_controller_config(path)
    return config.kubernetes if config.runner == "kubernetes" else None


def read_verdict(log: str, nonce: str, boundary: bool = True) -> TestRun:
    """The test run the pod's log reports, judged as `testrun` judges a local one; a log that forges or repeats the
    verdict line, or whose nonce is not `nonce`, is a run whose outcomes cannot be believed. NoVerdict without one;
    GradingInfraError when the pod says its image cannot run the tests, or (`boundary`: the input had the boundary's
    files) that it could not keep the boundary; without them that exit status is the tested code's, an ordinary one."""
    lines = [line[len(VERDICT_PREFIX):] for line in log.splitlines() if line.startswith(VERDICT_PREFIX)]
    if not lines:
        raise NoVerdict(f"the grading pod wrote no verdict; its log's tail:\n{log[-LOG_TAIL_CHARS:]}")
    if len(lines) > 1:
        return TestRun({}, output_tail=log[-LOG_TAIL_CHARS:], returncode=-1, forged=True,
                       problem=f"the grading pod's log holds {len(lines)} verdict lines: something besides the "
                               "grader wrote to it")
    try:
        data = json.loads(lines[0])
        if data.get("infra") and hmac.compare_digest(str(data["nonce"]), nonce):
            raise GradingInfraError(f"the grading pod could not run the tests: {data['infra']}")
        valid_nonce = hmac.compare_digest(str(data["nonce"]), nonce)
        rounds = [_round(record) for record in data["rounds"]] if "rounds" in data else [_round(data)]
        if not rounds or any(set(roles) != set(rounds[0][1]) for _, roles in rounds):
            raise ValueError("the rounds are missing or do not name the same graded tests")
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError, binascii.Error) as error:
        return TestRun({}, returncode=-1, problem=f"the grading pod's verdict line is malformed ({error})")
    if not valid_nonce:
        return TestRun({}, returncode=rounds[0][0].returncode, forged=True,
                       problem="the grading pod's verdict carries the wrong nonce: it was not written by the grader")
    if boundary and any(run.returncode == UNAVAILABLE_EXIT for run, _ in rounds):  # only T's start exits so
        raise GradingInfraError("the grading pod could not keep the tested code in a process of its own (the node's "
                                "kernel offers no Landlock and the checkout is the pod user's): "
                                f"{rounds[0][0].output_tail[-400:]}")
    if "rounds" not in data:  # one run without canaries (an image from before them)
        return rounds[0][0]
    return merge_rounds([roles for _, roles in rounds], [run for run, _ in rounds])


def _round(record: dict[str, Any]) -> tuple[TestRun, dict[str, Role]]:
    """One run of the verdict judged as `testrun` judges a local one, with the graded tests' roles in it."""
    raw, returncode = base64.b64decode(record["document"], validate=True), int(record["returncode"])
    timed_out, tail = bool(record["timed_out"]), str(record["output_tail"])
    roles: dict[str, Role] = {str(test): "canary" if role == "canary" else "real"
                              for test, role in record.get("roles", {}).items()}
    document = parse_document(raw)
    own, _ = split_sentinel(document.outcomes)
    problem = None if timed_out else disagreement(document, returncode, sentinel=True)
    return TestRun(outcomes=own, messages=document.messages, output_tail=tail, returncode=returncode,
                   problem=problem, timed_out=timed_out, xfailed=document.xfailed,
                   forged=problem is not None and (returncode == TAMPER_EXIT or rewritten(document))), roles


@dataclass(frozen=True)
class JobGrading:
    """Grading `swe` rollouts in Kubernetes Jobs."""

    settings: KubernetesSettings  # namespace, image, CPU and memory of the grading pods
    runner: Any = None  # a KubeJobRunner (tests pass one on the fake API server); None: one from `settings`
    timeout_s: float = 600.0  # the tests' time limit inside the pod (the Job's deadline adds start-up margin)
    forgery_probe: bool = True  # an unresolved verdict's failing tests again, no boundary (`forgery_probe`)

    def grade_workdir(self, store: Path, instance: dict[str, Any], agent_repo: Path, attempt_key: str) -> Grade:
        """Grade the agent's repository copy (its diff computed here, never taken from the harness)."""
        if (problem := repo_problem(instance, agent_repo)) is not None:
            return problem
        try:
            patch = agent_patch(store, instance, agent_repo)
        except AgentDiffError as error:
            return Grade(reward=0.0, details={"instance_id": instance["instance_id"], "resolved": False,
                                              "error": str(error)})
        return self.grade_patch(store, instance, patch, attempt_key)

    def grade_patch(self, store: Path, instance: dict[str, Any], patch: str, attempt_key: str,
                    policy: PatchPolicy = DEFAULT_POLICY) -> Grade:
        """The patch policy here; the allowed part's tests in a grading Job (an unresolved verdict's again in a
        probe Job without the boundary when `forgery_probe`)."""
        details: dict[str, Any] = {"instance_id": instance["instance_id"], "patch_chars": len(patch),
                                   "model_patch": patch if len(patch) <= MAX_MODEL_PATCH_CHARS else None,
                                   "resolved": False, "tamper": False}
        packed = _packed_input(store, instance, patch, policy, details, self.timeout_s)
        if isinstance(packed, Grade):
            return packed
        details["grading_job"], run = self._run_job(packed, instance["instance_id"], attempt_key)
        if isinstance(run, NoVerdict):
            return Grade(reward=0.0, details={**details, "error": str(run)})
        if run.problem or run.timed_out:
            return Grade(reward=0.0, details={**details, **run_details(run)})
        resolved, broken = is_resolved(run, instance["FAIL_TO_PASS"], instance["PASS_TO_PASS"])
        details |= {"resolved": resolved, **broken, "pytest_returncode": run.returncode}
        if not resolved:
            details["pytest_tail"] = run.output_tail
        if self.forgery_probe and wants_probe(details):
            details |= self._probe(probe_input(packed, probed_tests(details)), instance["instance_id"], attempt_key)
        return Grade(reward=1.0 if resolved else 0.0, details=details)

    def _probe(self, packed: dict[str, bytes], instance_id: str, attempt_key: str) -> dict[str, Any]:
        """The forgery probe's Job on its input (`probe_input`). It never makes the grade infra or an error: a Job the
        cluster could not run, no verdict or anything it raised only leaves the probe without a finding."""
        try:
            _, probe = self._run_job(packed, instance_id, f"{attempt_key}/forgery-probe", boundary=False)
        except Exception as error:  # noqa: BLE001 - the probe only ever adds a finding; the verdict stands without it
            return probe_failed(error)
        return probe_failed(probe) if isinstance(probe, NoVerdict) else probe_details(probe)

    def _run_job(self, packed: dict[str, bytes], instance_id: str, attempt_key: str,
                 boundary: bool = True) -> tuple[str, TestRun | NoVerdict]:
        """One grading Job on `packed` (`boundary`: with the boundary's files): how it ended and its verdict
        (NoVerdict when its log has none)."""
        name, nonce = grading_name(instance_id, attempt_key), new_nonce()
        job = build_swe_grading_job(instance_id, name, self.settings, self.timeout_s, nonce)
        secret = build_swe_grading_secret(packed, instance_id, name, self.settings.namespace)
        ran = self._runner().run_job(secret, job, self.settings.image, job["spec"]["activeDeadlineSeconds"])
        try:
            return ran.ending, read_verdict(ran.log, nonce, boundary)
        except NoVerdict as error:
            return ran.ending, error

    def _runner(self) -> KubeJobRunner:
        if self.runner is None:
            object.__setattr__(self, "runner", KubeJobRunner(self.settings))
        return self.runner


def _packed_input(store: Path, instance: dict[str, Any], patch: str, policy: PatchPolicy, details: dict[str, Any],
                  timeout_s: float) -> dict[str, bytes] | Grade:
    """The grading input of the allowed part of `patch` on a fresh checkout, or the grade when there is nothing to
    run (a tampered or unappliable diff); `details` gets the policy's findings. GradingInfraError when too large."""
    with tempfile.TemporaryDirectory(prefix="harnessrl-swe-grade-") as scratch:
        fresh = Path(scratch) / "repo"
        if (nothing_to_run := graded_checkout(store, instance, patch, policy, details, fresh)) is not None:
            return nothing_to_run
        tests = instance["FAIL_TO_PASS"] + instance["PASS_TO_PASS"]
        try:
            return pack_grading_input(fresh, tests, timeout_s, watched=details["graded_files"])
        except GradingInputTooLarge as error:
            return _too_large(store, instance, tests, timeout_s, details, error, Path(scratch) / "base")


def _too_large(store: Path, instance: dict[str, Any], tests: list[str], timeout_s: float, details: dict[str, Any],
               error: GradingInputTooLarge, scratch: Path) -> Grade:
    """Whose an input over a Secret's limit is: the task's (its checkout alone is too large: GradingInfraError, the
    grader's) or the agent's (its diff made it so: reward 0, named, never an infra retry it could provoke)."""
    try:
        pack_grading_input(checkout(store, instance, scratch), tests, timeout_s)
    except GradingInputTooLarge:
        raise GradingInfraError(f"instance {instance['instance_id']!r}: {error}") from error
    return Grade(reward=0.0, details={**details, "error": f"the agent's diff makes the grading input too large: "
                                                          f"{error}"})
