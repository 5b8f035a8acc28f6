"""The `swe` recipe graded through a grading Job against the fake API server (tests/controller/fake_kube.py), the
fake cluster running the pod's entry point for real as nobody on the Secret it was sent; the verdict line's rules;
which runner grades through Jobs (the shipped manifests do)."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from controller.config import KubernetesSettings
from controller.recipe import GradeInput
from recipes.swe import grading_job
from recipes.swe.diffs import apply_patch, split_patch
from recipes.swe.forgery_probe import PROBE_REASON
from recipes.swe.grading_job import NONCE_ENV
from recipes.swe.grading_job_pod import verdict_line
from recipes.swe.kube_grading import GradingInfraError, KubeJobRunner
from recipes.swe.kube_grading_swe import CONFIG_ENV, JobGrading, NoVerdict, job_settings_from_env, read_verdict
from recipes.swe.recipe import SweRecipe, rollout_input
from recipes.swe.testrun import BOUNDARY_FILES
from tests.controller.fake_kube import FakeKube, when_job_exists
from tests.recipes.swe import grading_pod_support
from tests.recipes.swe.grading_pod_support import run_pod
from tests.recipes.swe.test_verdict_attacks import TARGETED_REPORTS

REPO_ROOT = Path(__file__).resolve().parents[3]
nobody_python, pod_dir = grading_pod_support.nobody_python, grading_pod_support.pod_dir  # the fixtures
NONCE = "feedfacefeedfacefeedfacefeedface"
SENTINEL = "test_harnessrl_sentinel_ab12cd34.py"
HONEST_DOCUMENT = {"outcomes": {"t.py::a": "passed", f"{SENTINEL}::test_must_pass": "passed",
                                f"{SENTINEL}::test_must_fail": "failed"}, "messages": {}, "exitstatus": 1}


@pytest.fixture
def kube():
    with FakeKube() as fake:
        yield fake


def _line(document: dict, nonce: str = NONCE, returncode: int = 1) -> str:
    return verdict_line(nonce, returncode, False, json.dumps(document).encode(), "tail")


def test_an_honest_verdict_is_read_as_a_local_run_would_be():
    run = read_verdict(f"noise before\n{_line(HONEST_DOCUMENT)}\n", NONCE)
    assert run.problem is None and run.outcomes == {"t.py::a": "passed"} and run.returncode == 1


@pytest.mark.parametrize(("log", "reason"), [
    (_line(HONEST_DOCUMENT, nonce="0" * 32), "wrong nonce"),
    (_line(HONEST_DOCUMENT) + "\n" + _line(HONEST_DOCUMENT), "2 verdict lines"),
    ("harnessrl-swe-verdict {not json", "malformed"),
    (_line({**HONEST_DOCUMENT, "outcomes": {"t.py::a": "passed"}}), "sentinel"),
    (_line(HONEST_DOCUMENT, returncode=0), "exit status disagrees"),
])
def test_a_verdict_that_cannot_be_believed_is_a_problem(log, reason):
    run = read_verdict(log, NONCE)
    assert run.problem is not None and reason in run.problem, run.problem


def test_an_image_without_pytest_is_an_infra_error_only_with_the_nonce():
    line = verdict_line(NONCE, -1, False, b"", "", infra="pytest is not installed")
    with pytest.raises(GradingInfraError, match="pytest is not installed"):
        read_verdict(line, NONCE)
    assert read_verdict(line, "0" * 32).problem is not None  # a forged infra claim is no excuse


def test_a_pod_that_cannot_keep_the_boundary_is_an_infra_error_only_with_the_nonce():
    from recipes.swe.process_boundary import UNAVAILABLE_EXIT

    line = verdict_line(NONCE, UNAVAILABLE_EXIT, False, b"", "this kernel offers no Landlock")
    with pytest.raises(GradingInfraError, match="no Landlock"):
        read_verdict(line, NONCE)
    assert read_verdict(line, "0" * 32).problem is not None


def test_without_the_boundary_its_exit_status_is_the_tested_codes_not_infra():
    """A forgery probe's Job has no boundary: there the tested code runs in pytest's process and may exit with the
    boundary's status itself; that is a run that cannot be believed (its exit status disagrees), never infra."""
    from recipes.swe.process_boundary import UNAVAILABLE_EXIT

    line = verdict_line(NONCE, UNAVAILABLE_EXIT, False, json.dumps(HONEST_DOCUMENT).encode(), "tail")
    run = read_verdict(line, NONCE, boundary=False)
    assert run.problem is not None and "exit status" in run.problem, run.problem


def test_a_log_without_a_verdict_is_no_verdict():
    with pytest.raises(NoVerdict, match="wrote no verdict"):
        read_verdict("Killed\n", NONCE)


def _run_the_pod(kube: FakeKube, directory: Path, python: str, seen: dict) -> Callable[[str], None]:
    """The cluster's part: run the pod's entry point on the Secret's files with the Job's nonce (in a folder of the
    Job's own), then end the Job."""
    def act(name: str) -> None:
        secret, job = kube.objects["secrets"][name], kube.objects["jobs"][name]
        files = {key: base64.b64decode(value) for key, value in secret["data"].items()}
        (container,) = job["spec"]["template"]["spec"]["containers"]
        nonce = {item["name"]: item["value"] for item in container["env"]}[NONCE_ENV]
        seen.update({"files": sorted(files), "nonce_in_secret": nonce.encode() in b"".join(files.values())})
        seen.setdefault("jobs", []).append(sorted(files))
        kube.add_pod(name, {"phase": "Succeeded"}, log=run_pod(files, directory / name, python, nonce))
        kube.set_job_status(name, {"conditions": [{"type": "Complete", "status": "True"}]})
    return act


def _recipe(kube: FakeKube, store: Path) -> SweRecipe:
    settings = KubernetesSettings(namespace="agents", api_url=kube.url)
    return SweRecipe(store=store, source="unused",
                     job_grading=JobGrading(settings, runner=KubeJobRunner(settings, poll_s=0.02), timeout_s=60.0))


def _attempt(tiny_store, workdir: Path) -> tuple[dict, dict, Path]:
    store, instances = tiny_store
    task = rollout_input(instances[0], store)
    SweRecipe(store=store, source="unused").prepare_workdir(task, workdir)
    return instances[0], task, workdir / "repo"


def test_a_genuine_fix_graded_in_a_job_is_reward_1_and_everything_is_deleted(kube, tiny_store, tmp_path,
                                                                            nobody_python, pod_dir):
    instance, task, repo = _attempt(tiny_store, tmp_path / "r1.a1")
    apply_patch(repo, instance["patch"], reverse=True)
    seen: dict = {}
    thread = when_job_exists(kube, _run_the_pod(kube, pod_dir, nobody_python, seen))
    grade = _recipe(kube, tiny_store[0]).grade(GradeInput(task=task, workdir=tmp_path / "r1.a1", calls=[],
                                                          exit_code=0))
    thread.join()
    assert grade.reward == 1.0 and grade.details["resolved"] and grade.details["grading_job"] == "complete", grade
    assert grade.details["tamper"] is False and grade.details["model_patch"]
    assert seen["nonce_in_secret"] is False and "instances.jsonl" not in seen["files"]
    assert ("POST", "/apis/batch/v1/namespaces/agents/jobs") in kube.requests
    assert kube.objects["jobs"] == {} and kube.objects["secrets"] == {} and kube.objects["pods"] == {}


def test_a_forgery_graded_in_a_job_is_zero_and_the_probe_job_names_it(kube, tiny_store, tmp_path, nobody_python,
                                                                      pod_dir):
    """The forgery reaches nothing behind the pod's boundary (reward 0); the probe Job, the same input without the
    boundary's files, runs it in pytest's process, where the canary rounds name it `tamper`."""
    instance, task, repo = _attempt(tiny_store, tmp_path / "r1.a1")
    changed = next(iter(split_patch(instance["patch"])))
    with (repo / changed).open("a") as handle:
        handle.write(TARGETED_REPORTS.replace("TARGETS", repr(set(instance["FAIL_TO_PASS"]))))
    seen: dict = {}
    thread = when_job_exists(kube, _run_the_pod(kube, pod_dir, nobody_python, seen), count=2, timeout_s=240)
    grade = _recipe(kube, tiny_store[0]).grade(GradeInput(task=task, workdir=tmp_path / "r1.a1", calls=[],
                                                          exit_code=0))
    thread.join()
    assert grade.reward == 0.0 and grade.details["resolved"] is False, grade.details
    assert grade.details["tamper"] is True and grade.details["forgery_probe"] == "tamper", grade.details
    (reason,) = grade.details["tamper_reasons"]
    assert reason.startswith(PROBE_REASON) and "canary" in reason, reason
    boundary_job, probe_job = seen["jobs"]
    assert set(BOUNDARY_FILES) <= set(boundary_job) and not set(BOUNDARY_FILES) & set(probe_job)
    assert set(boundary_job) - set(BOUNDARY_FILES) == set(probe_job)
    assert kube.objects["jobs"] == {} and kube.objects["secrets"] == {} and kube.objects["pods"] == {}


def test_a_probe_job_the_cluster_cannot_run_leaves_the_grade_as_it_was(kube, tiny_store, tmp_path, nobody_python,
                                                                      pod_dir):
    """An honest wrong fix: the boundary's Job says unresolved; the probe Job's creation is refused (an API error,
    infra anywhere else): the grade stays reward 0 without `tamper`, the probe without a finding, never infra."""
    instance, task, repo = _attempt(tiny_store, tmp_path / "r1.a1")
    changed = next(iter(split_patch(instance["patch"])))
    with (repo / changed).open("a") as handle:
        handle.write("\n\ndef _unrelated_helper(value):\n    return [value, value]\n")
    run_the_pod = _run_the_pod(kube, pod_dir, nobody_python, {})
    def act(name: str) -> None:
        run_the_pod(name)
        kube.fail_next[("POST", "jobs")] = 403  # the next Job, the probe's
    thread = when_job_exists(kube, act)
    grade = _recipe(kube, tiny_store[0]).grade(GradeInput(task=task, workdir=tmp_path / "r1.a1", calls=[],
                                                          exit_code=0))
    thread.join()
    assert grade.reward == 0.0 and grade.details["resolved"] is False and grade.details["tamper"] is False, grade
    assert grade.details["forgery_probe"] == "no verdict" and "403" in grade.details["forgery_probe_error"]
    assert kube.objects["jobs"] == {} and kube.objects["secrets"] == {}


def test_a_tampered_diff_is_zero_with_the_flag_and_no_job(kube, tiny_store, tmp_path):
    instance, task, repo = _attempt(tiny_store, tmp_path / "r1.a1")
    apply_patch(repo, instance["patch"], reverse=True)
    (repo / "tests" / "test_tinymath.py").write_text("def test_clamp_inside():\n    pass\n")
    grade = _recipe(kube, tiny_store[0]).grade(GradeInput(task=task, workdir=tmp_path / "r1.a1", calls=[],
                                                          exit_code=0))
    assert grade.reward == 0.0 and grade.details["tamper"] is True and grade.details["tamper_reasons"]
    assert kube.requests == []


def test_a_pod_that_ends_without_a_verdict_is_zero_with_the_error(kube, tiny_store, tmp_path):
    instance, task, repo = _attempt(tiny_store, tmp_path / "r1.a1")
    apply_patch(repo, instance["patch"], reverse=True)  # a change to grade (an unchanged tree starts no Job)
    def act(name: str) -> None:
        kube.add_pod(name, {"phase": "Succeeded"}, log="Killed\n")
        kube.set_job_status(name, {"conditions": [{"type": "Complete", "status": "True"}]})
    thread = when_job_exists(kube, act)
    grade = _recipe(kube, tiny_store[0]).grade(GradeInput(task=task, workdir=tmp_path / "r1.a1", calls=[],
                                                          exit_code=0))
    thread.join()
    assert grade.reward == 0.0 and "wrote no verdict" in grade.details["error"] and not grade.details["tamper"]
    assert kube.objects["jobs"] == {} and kube.objects["secrets"] == {}


def test_an_input_over_a_secrets_limit_or_an_api_error_is_an_infra_error(kube, tiny_store, tmp_path, monkeypatch):
    instance, task, repo = _attempt(tiny_store, tmp_path / "r1.a1")
    apply_patch(repo, instance["patch"], reverse=True)  # a change to grade (an unchanged tree starts no Job)
    graded = GradeInput(task=task, workdir=tmp_path / "r1.a1", calls=[], exit_code=0)
    kube.fail_next[("POST", "jobs")] = 403
    with pytest.raises(GradingInfraError, match="403"):
        _recipe(kube, tiny_store[0]).grade(graded)
    assert kube.objects["secrets"] == {}
    monkeypatch.setattr(grading_job, "MAX_SECRET_BYTES", 1000)
    requests = len(kube.requests)
    with pytest.raises(GradingInfraError, match=r"over the 1000 bytes a Kubernetes Secret holds"):
        _recipe(kube, tiny_store[0]).grade(graded)
    assert len(kube.requests) == requests


def test_an_unchanged_tree_is_an_empty_patch_and_starts_no_job(kube, tiny_store, tmp_path):
    _, task, _ = _attempt(tiny_store, tmp_path / "r1.a1")
    grade = _recipe(kube, tiny_store[0]).grade(GradeInput(task=task, workdir=tmp_path / "r1.a1", calls=[],
                                                          exit_code=0))
    assert grade.reward == 0.0 and grade.details["empty_patch"] is True and not grade.details["tamper"]
    assert kube.requests == []  # no Secret, no Job


@pytest.mark.parametrize(("runner", "jobs"), [("kubernetes", True), ("local", False), (None, False)])
def test_the_controllers_runner_decides_where_swe_is_graded(tmp_path, monkeypatch, runner, jobs):
    if runner is None:
        monkeypatch.delenv(CONFIG_ENV, raising=False)
    else:
        config = tmp_path / "controller.yaml"
        config.write_text(yaml.safe_dump({"runner": runner, "kubernetes": {"namespace": "ns", "image": "i:1"}}))
        monkeypatch.setenv(CONFIG_ENV, str(config))
    settings = job_settings_from_env()
    assert (settings is not None) is jobs
    assert settings is None or (settings.namespace, settings.image) == ("ns", "i:1")


def test_the_shipped_controller_grades_swe_through_jobs(monkeypatch):
    documents = list(yaml.safe_load_all((REPO_ROOT / "deploy/k8s/base/controller.yaml").read_text()))
    (deployment,) = [doc for doc in documents if doc["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    env = {item["name"]: item.get("value") for item in container["env"]}
    assert env[CONFIG_ENV] == "/etc/harnessrl/controller/controller.yaml"
    monkeypatch.setenv(CONFIG_ENV, str(REPO_ROOT / "deploy/k8s/base/controller-config.yaml"))
    assert job_settings_from_env() is not None


def test_an_input_the_agents_diff_made_too_large_is_the_agents_zero_not_infra(kube, tiny_store, tmp_path,
                                                                            monkeypatch):
    """Attack review: megabytes of comments appended to the module passed every cap until the Secret's, which made the
    grade infra (no reward 0, no retry counted): now the agent's failure when its checkout alone fits."""
    instance, task, repo = _attempt(tiny_store, tmp_path / "r1.a1")
    alone = sum(len(data) for data in grading_job.pack_grading_input(
        repo, instance["FAIL_TO_PASS"] + instance["PASS_TO_PASS"], 60.0).values())
    monkeypatch.setattr(grading_job, "MAX_SECRET_BYTES", alone + 8_000)  # the runner files counted in `alone`
    changed = next(iter(split_patch(instance["patch"])))
    with (repo / changed).open("a") as handle:
        handle.write("".join(f"# {index:064x}\n" for index in range(4_000)))  # incompressible enough
    grade = _recipe(kube, tiny_store[0]).grade(GradeInput(task=task, workdir=tmp_path / "r1.a1", calls=[],
                                                          exit_code=0))
    assert grade.reward == 0.0 and "the agent's diff makes the grading input too large" in grade.details["error"]
    assert kube.requests == []
