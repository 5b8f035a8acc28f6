"""The workdir transfer of the KubernetesRunner end to end: real gateway, fake API server, and the Job's own
`python -c` programs run as subprocesses with the env the manifest sets (the fake cluster runs no containers)."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from controller.config import KubernetesSettings
from controller.pod_transfer import NOT_STARTED_MARK
from controller.runners.base import RunSpec, Termination
from controller.runners.k8s_status import pod_ending
from controller.runners.kubernetes import KubernetesRunner
from controller.runners.manifests import WORKDIR, job_name
from controller.workdir_transfer import RESULT_ARCHIVE, WORKDIR_ARCHIVE, pack_workdir, unpack_archive
from gateway.records import EventKind, RolloutSpec
from tests.controller.fake_kube import FakeKube

NS = "agents"
HARNESS = ("import os, pathlib; pathlib.Path('answer.txt').write_text(pathlib.Path('prepared.txt').read_text() + '!');"
           " os.remove('prepared.txt'); raise SystemExit(3)")


@pytest.fixture
def kube():
    with FakeKube() as fake:
        yield fake


@pytest.fixture
def claimed(admin, tmp_path) -> tuple[Any, RunSpec]:
    """A running rollout (attempt 1) and its prepared local workdir, as the controller's prepare_attempt leaves them."""
    rollout_id = f"kw-{tmp_path.name[-24:].replace('_', '-')}"
    admin.create_rollouts([RolloutSpec(id=rollout_id, group_id="kw", input={"id": rollout_id})])
    rollout = next(r for r in admin.claim("kw-test", limit=100, lease_s=300) if r.id == rollout_id)
    base_url, api_key = rollout.base_url, rollout.api_key  # the key of attempt 1, as the claim returns it
    workdir = tmp_path / "local"
    (workdir / "repo").mkdir(parents=True)
    (workdir / "task.json").write_text(f'{{"id": "{rollout_id}"}}')
    (workdir / "prepared.txt").write_text("corpus")
    (workdir / "repo" / "main.py").write_text("print('hi')\n")
    spec = RunSpec(rollout_id=rollout_id, attempt=rollout.attempt, command=(sys.executable, "-c", HARNESS),
                   base_url=base_url, api_key=api_key, task={"id": rollout_id}, workdir=workdir,
                   timeout_s=60, stdout_path=tmp_path / "out", stderr_path=tmp_path / "err")
    return rollout, spec


def runner(kube: FakeKube, admin) -> KubernetesRunner:
    return KubernetesRunner(KubernetesSettings(namespace=NS, api_url=kube.url), 2, admin)


def container_env(kube: FakeKube, container: dict[str, Any]) -> dict[str, str]:
    """The container's env as the kubelet would set it (secretKeyRef read from the Secret the runner created)."""
    env = {"PATH": os.environ["PATH"]}
    for item in container.get("env", []):
        ref = item.get("valueFrom", {}).get("secretKeyRef")
        env[item["name"]] = kube.objects["secrets"][ref["name"]]["stringData"][ref["key"]] if ref else item["value"]
    return env


def run_container(kube: FakeKube, container: dict[str, Any], pod_dir: Path) -> subprocess.CompletedProcess:
    """Run a container's command here: `python` is this interpreter and /workspace is `pod_dir`."""
    argv = [sys.executable if arg == "python" else str(pod_dir) if arg == WORKDIR else arg
            for arg in container["command"]]
    env = {**container_env(kube, container), "HARNESSRL_TERMINATION_LOG": str(pod_dir.parent / "termination-log")}
    return subprocess.run(argv, cwd=pod_dir, env=env, capture_output=True, text=True, timeout=60, check=False)


def pod_containers(kube: FakeKube, spec: RunSpec) -> dict[str, dict[str, Any]]:
    pod = kube.objects["jobs"][job_name(spec.rollout_id, spec.attempt)]["spec"]["template"]["spec"]
    return {c["name"]: c for c in pod["initContainers"] + pod["containers"]}


def finish_job(kube: FakeKube, spec: RunSpec, exit_code: int) -> None:
    name, done = job_name(spec.rollout_id, spec.attempt), exit_code == 0
    kube.add_pod(name, {"phase": "Succeeded" if done else "Failed", "containerStatuses": [{"name": "harness", "state": {
        "terminated": {"exitCode": exit_code, "reason": "Completed" if done else "Error"}}}]})
    kube.set_job_status(name, {"conditions": [{"type": "Complete" if done else "Failed", "status": "True"}],
                               "succeeded" if done else "failed": 1})


def test_the_jobs_own_programs_fetch_the_workdir_and_return_the_result(kube, admin, claimed, tmp_path):
    rollout, spec = claimed
    run = runner(kube, admin)
    run.start(spec)
    containers, pod_dir = pod_containers(kube, spec), tmp_path / "pod"
    pod_dir.mkdir()
    fetched = run_container(kube, containers["workdir"], pod_dir)
    assert fetched.returncode == 0, fetched.stderr
    assert (pod_dir / "prepared.txt").read_text() == "corpus" and (pod_dir / "repo" / "main.py").is_file()
    harness = run_container(kube, containers["harness"], pod_dir)
    assert harness.returncode == 3, harness.stderr  # the harness's own exit code survives the wrapper
    finish_job(kube, spec, harness.returncode)
    [result] = run.poll()
    assert (result.termination, result.exit_code) == (Termination.EXITED, 3)
    assert sorted(p.relative_to(spec.workdir).as_posix() for p in spec.workdir.rglob("*")) == [
        "answer.txt", "repo", "repo/main.py", "task.json"]  # the pod's tree, ready for grading
    assert (spec.workdir / "answer.txt").read_text() == "corpus!"
    run.release(rollout.id)


def test_a_pod_simulated_by_the_test_with_the_rollout_key(kube, admin, claimed, tmp_path):
    rollout, spec = claimed
    run = runner(kube, admin)
    run.start(spec)
    key = {"authorization": f"Bearer {spec.api_key}"}
    root = spec.base_url.removesuffix("/v1") + "/artifacts/"
    pod_dir = tmp_path / "pod"
    unpack_archive(httpx.get(root + WORKDIR_ARCHIVE, headers=key).raise_for_status().content, pod_dir)
    (pod_dir / "prepared.txt").write_text("edited in the pod")
    httpx.put(root + RESULT_ARCHIVE, content=pack_workdir(pod_dir), headers=key).raise_for_status()
    finish_job(kube, spec, 0)
    run.poll()
    assert (spec.workdir / "prepared.txt").read_text() == "edited in the pod"
    assert admin.get_artifact(rollout.id, WORKDIR_ARCHIVE) != admin.get_artifact(rollout.id, RESULT_ARCHIVE)


@pytest.mark.parametrize(("command", "exit_code"), [
    ([sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"], 137),
    (["/nonexistent/harness"], 127),
])
def test_the_wrapper_reports_like_a_shell_and_still_returns_the_workdir(kube, admin, claimed, tmp_path,
                                                                      command, exit_code):
    rollout, spec = claimed
    spec = dataclasses.replace(spec, command=tuple(command))
    runner(kube, admin).start(spec)
    pod_dir = tmp_path / "pod"
    pod_dir.mkdir()
    containers = pod_containers(kube, spec)
    assert run_container(kube, containers["workdir"], pod_dir).returncode == 0
    assert run_container(kube, containers["harness"], pod_dir).returncode == exit_code
    termination = tmp_path / "termination-log"
    assert (termination.exists() and NOT_STARTED_MARK in termination.read_text()) == (exit_code == 127)
    if exit_code == 127:  # the runner reads this as a start failure (infra), not the harness's own exit 127
        assert pod_ending({"status": {"containerStatuses": [{"state": {"terminated": {
            "exitCode": 127, "reason": "Error", "message": termination.read_text()}}}]}})[0] == Termination.START_FAILED
    unpack_archive(admin.get_artifact(rollout.id, RESULT_ARCHIVE), tmp_path / "back")
    assert (tmp_path / "back" / "prepared.txt").read_text() == "corpus"


def test_without_a_result_the_prepared_workdir_is_graded_and_an_event_says_so(kube, admin, claimed, tmp_path):
    rollout, spec = claimed
    run = runner(kube, admin)
    run.start(spec)
    finish_job(kube, spec, 0)  # the pod never uploaded (killed before the wrapper could)
    [result] = run.poll()
    assert result.termination == Termination.EXITED
    assert (spec.workdir / "prepared.txt").read_text() == "corpus"
    notes = [e for e in admin.list_events(rollout.id) if e.kind == EventKind.LOG and "message" in e.payload]
    assert any(RESULT_ARCHIVE in e.payload["message"] for e in notes)


def test_the_fetch_program_fails_the_init_container_when_the_workdir_is_absent(kube, admin, claimed, tmp_path):
    _, spec = claimed
    runner(kube, admin).start(spec)
    fetch = pod_containers(kube, spec)["workdir"]
    assert spec.api_key not in str(fetch)  # the key comes from the Secret, never inline
    fetch = {**fetch, "command": [*fetch["command"][:-1], "missing.tar.gz"]}
    failed = run_container(kube, fetch, tmp_path)
    assert failed.returncode != 0 and "404" in failed.stderr


def test_a_harness_that_writes_the_start_failure_mark_itself_is_still_its_own_exit(kube, admin, claimed, tmp_path):
    rollout, spec = claimed
    forge = (f"import os, sys; open(os.environ['HARNESSRL_TERMINATION_LOG'], 'w').write({NOT_STARTED_MARK!r} + ': x'); "
             "sys.exit(127)")
    spec = dataclasses.replace(spec, command=(sys.executable, "-c", forge))
    runner(kube, admin).start(spec)
    pod_dir = tmp_path / "pod"
    pod_dir.mkdir()
    containers = pod_containers(kube, spec)
    assert run_container(kube, containers["workdir"], pod_dir).returncode == 0
    assert run_container(kube, containers["harness"], pod_dir).returncode == 127
    assert NOT_STARTED_MARK not in (tmp_path / "termination-log").read_text()  # the kubelet reports no start failure
