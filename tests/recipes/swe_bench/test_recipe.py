"""The swe_bench recipe: what a rollout carries, the grading Job and Secret (strict schemas), grading through a
KubeGrader against the fake API server (tests/controller/fake_kube.py) including grading pods the cluster fails
(image pulls, evictions, deadlines), the plan's routing and the runner creating the two-container Job for a swe_bench
rollout."""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path

import kubernetes_validate
import pytest

from controller.config import KubernetesSettings
from controller.recipe import GradeInput
from controller.recipes import get_recipe
from controller.runners.kubernetes import KubernetesRunner
from controller.runners.manifests import job_name
from recipes.swe.evaluation import bench_rollout_tasks
from recipes.swe_bench.eval_script import TEST_PATCH_FAIL
from recipes.swe_bench.grading_job import (
    GradingInputTooLarge,
    build_grading_job,
    build_grading_secret,
    grading_name,
)
from recipes.swe_bench.kube_grading import GradingInfraError, KubeGrader
from recipes.swe_bench.recipe import SweBenchRecipe, write_store
from tests.controller.fake_kube import FakeKube, when_job_exists
from tests.controller.test_kubernetes_runner import MemoryArtifacts
from tests.controller.test_manifests import K8S_VERSIONS
from tests.recipes.swe_bench.test_eval_script import SEP, pytest_log
from tests.recipes.swe_bench.test_eval_script import instance as bench_instance

IMAGE = "swebench/sweb.eval.x86_64.astropy_1776_astropy-12907:latest"


def normalised() -> dict:
    return {**bench_instance(), "source": "swe-bench-verified", "problem_statement": "separability is wrong",
            "image_name": None, "fix_patch": "diff --git a/fix b/fix", "bug_patch": None, "created_at": None,
            "environment_setup_commit": None}


@pytest.fixture
def kube():
    with FakeKube() as fake:
        yield fake


def test_rollout_inputs_carry_the_image_and_no_fix_or_tests(tmp_path):
    write_store([normalised()], tmp_path)
    (task,) = bench_rollout_tasks([normalised()], tmp_path)
    assert set(task) == {"id", "problem_statement", "image", "base_commit", "store", "recipe"}
    assert (task["image"], task["recipe"]) == (IMAGE, "swe_bench")
    assert "test_separable" not in str(task) and "fix" not in str(task)
    assert SweBenchRecipe(store=tmp_path).generate(1, seed=3) == [{k: v for k, v in task.items() if k != "recipe"}]
    assert get_recipe("swe_bench").harness_command()[1:] == ["-m", "recipes.swe_bench.harness"]


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_grading_job_and_secret_validate_strictly(version):
    settings = KubernetesSettings(namespace="agents", service_account="grader")
    name = grading_name("astropy__astropy-12907", "r1.a1")
    kubernetes_validate.validate(build_grading_job(normalised(), IMAGE, name, settings, 900), version, strict=True)
    kubernetes_validate.validate(build_grading_secret(normalised(), "diff", name, "agents"), version, strict=True)


def test_grading_job_shape_and_limits():
    job = build_grading_job(normalised(), IMAGE, "harnessrl-grade-x", KubernetesSettings(), 900.5)
    pod = job["spec"]["template"]["spec"]
    assert (job["spec"]["backoffLimit"], job["spec"]["activeDeadlineSeconds"]) == (0, 901)
    assert pod["automountServiceAccountToken"] is False and pod["restartPolicy"] == "Never"
    [container] = pod["containers"]
    assert container["image"] == IMAGE and container["command"] == ["/bin/bash", "/var/run/harnessrl-grade/eval.sh"]
    assert job["metadata"]["labels"]["harnessrl.io/component"] == "grader"  # not picked up as an agent Job
    assert grading_name("a", "r1.a1") != grading_name("a", "r1.a2")
    with pytest.raises(GradingInputTooLarge, match="too large"):
        build_grading_secret(normalised(), "+" * (1024 * 1024), "n", "agents")


EXITED_1 = {"phase": "Failed", "containerStatuses": [
    {"name": "grade", "state": {"terminated": {"exitCode": 1, "reason": "Error"}}}]}
PULL_FAILING = {"phase": "Pending", "containerStatuses": [
    {"name": "grade", "state": {"waiting": {"reason": "ErrImagePull", "message": f"pull access denied for {IMAGE}"}}}]}


def _finish_grading_job(kube: FakeKube, log: str, condition: dict, pod: dict | None = None) -> threading.Thread:
    """Acts as the cluster: once the grading Job exists, give it a pod (`pod` status) with `log` and end it."""
    def act(name: str) -> None:
        kube.add_pod(name, pod or {"phase": "Succeeded"}, log=log)
        kube.set_job_status(name, {"conditions": [condition]})
    return when_job_exists(kube, act, timeout_s=10)


def grader(kube: FakeKube, **settings: float) -> KubeGrader:
    return KubeGrader(KubernetesSettings(namespace="agents", api_url=kube.url, **settings), poll_s=0.02)


def graded(tmp_path: Path, patch: str | None) -> tuple[SweBenchRecipe, GradeInput]:
    store, workdir = tmp_path / "store", tmp_path / "r1.a1"
    workdir.mkdir(parents=True)
    write_store([normalised()], store)
    if patch is not None:
        (workdir / "model.patch").write_text(patch)
    (task,) = bench_rollout_tasks([normalised()], store)
    return SweBenchRecipe(store=store), GradeInput(task=task, workdir=workdir, calls=[], exit_code=0)


def test_a_resolving_log_from_the_grading_job_is_reward_1_and_everything_is_deleted(kube, tmp_path):
    recipe, grade_input = graded(tmp_path, "diff --git a/x b/x\n")
    recipe = SweBenchRecipe(store=recipe.store, grader=grader(kube))
    thread = _finish_grading_job(kube, pytest_log(), {"type": "Complete", "status": "True"})
    grade = recipe.grade(grade_input)
    thread.join()
    assert grade.reward == 1.0 and grade.details["resolved"] and grade.details["grading_job"] == "complete"
    assert grade.details["model_patch"] == "diff --git a/x b/x\n"
    name = grading_name("astropy__astropy-12907", "r1.a1")
    assert ("POST", "/api/v1/namespaces/agents/secrets") in kube.requests
    assert ("DELETE", f"/apis/batch/v1/namespaces/agents/jobs/{name}") in kube.requests
    assert kube.objects["jobs"] == {} and kube.objects["secrets"] == {} and kube.objects["pods"] == {}


def test_a_patch_that_does_not_apply_is_unresolved_with_the_reason(kube, tmp_path):
    recipe, grade_input = graded(tmp_path, "diff --git a/x b/x\n")
    recipe = SweBenchRecipe(store=recipe.store, grader=grader(kube))
    thread = _finish_grading_job(kube, ">>>>> Patch Apply Failed\nerror: corrupt patch\n",
                                 {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}, EXITED_1)
    grade = recipe.grade(grade_input)
    thread.join()
    assert grade.reward == 0.0 and grade.details["grading_job"] == "failed"
    assert "corrupt patch" in grade.details["patch_error"] and "error" not in grade.details


def test_a_test_patch_that_does_not_apply_is_an_infra_error_not_the_models(kube, tmp_path):
    recipe, grade_input = graded(tmp_path, "diff --git a/x b/x\n")
    recipe = SweBenchRecipe(store=recipe.store, grader=grader(kube))
    log = f">>>>> Applied Patch\nerror: patch failed: {SEP}:1\n{TEST_PATCH_FAIL}\n"
    thread = _finish_grading_job(kube, log, {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"},
                                 EXITED_1)
    with pytest.raises(GradingInfraError, match=f"test patch of instance 'astropy__astropy-12907' does not apply "
                                                 f"in image {re.escape(IMAGE)} \\(not the model's patch\\)"):
        recipe.grade(grade_input)
    thread.join()


def test_api_errors_are_infra_errors_and_leave_nothing_behind(kube, tmp_path):
    kube.fail_next[("POST", "jobs")] = 403
    with pytest.raises(GradingInfraError, match="403"):
        grader(kube).run(normalised(), "diff", IMAGE, "harnessrl-grade-x", 60)
    assert kube.objects["secrets"] == {} and kube.objects["jobs"] == {}


def test_a_grading_pod_that_cannot_pull_its_image_is_an_infra_error_after_the_grace(kube):
    thread = when_job_exists(kube, lambda name: kube.add_pod(name, PULL_FAILING), timeout_s=10)
    started = time.monotonic()
    with pytest.raises(GradingInfraError, match=f"could not start image {IMAGE}: ErrImagePull: pull access denied"):
        grader(kube, image_pull_grace_s=0.3).run(normalised(), "diff", IMAGE, "harnessrl-grade-x", 5)
    thread.join()
    assert 0.3 <= time.monotonic() - started < 5  # not the Job's deadline plus a minute
    assert kube.objects["jobs"] == {} and kube.objects["secrets"] == {} and kube.objects["pods"] == {}


def test_a_pull_error_that_clears_within_the_grace_grades_normally(kube):
    def act(name: str) -> None:
        pod = kube.add_pod(name, PULL_FAILING, log="graded")
        time.sleep(0.2)
        kube.objects["pods"][pod]["status"] = {"phase": "Succeeded"}
        kube.set_job_status(name, {"conditions": [{"type": "Complete", "status": "True"}]})

    thread = when_job_exists(kube, act, timeout_s=10)
    run = grader(kube, image_pull_grace_s=30).run(normalised(), "diff", IMAGE, "harnessrl-grade-x", 5)
    thread.join()
    assert (run.ending, run.log) == ("complete", "graded")


def test_a_grading_job_past_its_deadline_ends_as_the_deadline_with_its_log(kube):
    killed = {"phase": "Failed", "containerStatuses": [
        {"name": "grade", "state": {"terminated": {"exitCode": 137, "reason": "Error"}}}]}
    thread = _finish_grading_job(kube, "tests still running", {"type": "Failed", "status": "True",
                                                               "reason": "DeadlineExceeded"}, killed)
    run = grader(kube).run(normalised(), "diff", IMAGE, "harnessrl-grade-x", 5)
    thread.join()
    assert (run.ending, run.log) == ("deadline", "tests still running")


@pytest.mark.parametrize(("pod", "job_status", "words"), [
    (None, {"conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}]},
     "lost its pod: Job failed (BackoffLimitExceeded) with no pod left"),
    (None, {"conditions": [{"type": "Complete", "status": "True"}]}, "ended without a pod to read the log of"),
    ({"phase": "Failed", "reason": "Evicted", "message": "node low on memory"}, {},
     "lost its pod: pod evicted: node low on memory"),
    ({"phase": "Failed", "reason": "NodeLost"}, {}, "lost its pod: pod NodeLost"),
])
def test_grading_jobs_the_cluster_failed_are_infra_errors(kube, pod, job_status, words):
    def act(name: str) -> None:
        if pod is not None:
            kube.add_pod(name, pod)
        kube.set_job_status(name, job_status)

    thread = when_job_exists(kube, act, timeout_s=10)
    started = time.monotonic()
    with pytest.raises(GradingInfraError, match=re.escape(words)):
        grader(kube).run(normalised(), "diff", IMAGE, "harnessrl-grade-x", 5)
    thread.join()
    assert time.monotonic() - started < 5
    assert kube.objects["jobs"] == {} and kube.objects["secrets"] == {}


def test_empty_or_missing_patches_are_not_graded(tmp_path):
    class Refusing:
        def run(self, *args):
            raise AssertionError("an empty patch must not start a grading Job")

    recipe, grade_input = graded(tmp_path / "empty", "")
    grade = SweBenchRecipe(store=recipe.store, grader=Refusing()).grade(grade_input)
    assert grade.reward == 0.0 and grade.details["model_patch"] == ""
    recipe, grade_input = graded(tmp_path / "missing", None)
    (grade_input.workdir / "model.patch.error").write_text("git diff exited 128: not a git repository")
    grade = SweBenchRecipe(store=recipe.store, grader=Refusing()).grade(grade_input)
    assert grade.reward == 0.0 and "not a git repository" in grade.details["error"]


def test_the_runner_starts_a_swe_bench_rollout_as_a_two_container_job(kube, tmp_path):
    from controller.runners.base import RunSpec

    recipe = get_recipe("swe_bench")
    (task,) = bench_rollout_tasks([normalised()], tmp_path / "store")
    workdir = tmp_path / "work"
    workdir.mkdir()
    recipe.prepare_workdir(task, workdir)
    spec = RunSpec(rollout_id="eval-0", attempt=1, command=tuple(recipe.harness_command()),
                   base_url="http://gw:8100/r/eval-0/v1", api_key="hrl.k", task=task, workdir=workdir, timeout_s=60,
                   stdout_path=tmp_path / "o", stderr_path=tmp_path / "e")
    settings = KubernetesSettings(namespace="agents", api_url=kube.url)
    runner = KubernetesRunner(settings, 2, MemoryArtifacts())
    runner.start(spec)
    job = kube.objects["jobs"][job_name("eval-0", 1)]
    pod = job["spec"]["template"]["spec"]
    assert [c["image"] for c in pod["initContainers"]][-1] == IMAGE
    assert pod["containers"][0]["command"][-3:] == ["python", "-m", "recipes.swe_bench.harness"]
    job.pop("status")
    job["metadata"].pop("uid")
    kubernetes_validate.validate(job, K8S_VERSIONS[-1], strict=True)
    runner.close()
    assert kube.objects["jobs"] == {}
