"""KubernetesRunner against a fake API server: creation, success, failure mapping, deletion, rate limit."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from controller.config import KubernetesSettings
from controller.runners.base import RunnerFullError, RunnerStartError, RunSpec, Termination
from controller.runners.k8s_status import job_ending, pod_ending
from controller.runners.kubernetes import CONTROLLER_LABEL, KubernetesRunner
from controller.runners.manifests import job_name, secret_name
from controller.workdir_transfer import WORKDIR_ARCHIVE
from gateway.client import GatewayAPIError
from tests.controller.fake_kube import FakeKube

NS = "agents"


@pytest.fixture
def kube():
    with FakeKube() as fake:
        yield fake


class MemoryArtifacts:
    """The runner's artifact seam kept in a dict (the real gateway is used in test_kubernetes_workdir.py)."""

    def __init__(self) -> None:
        self.blobs: dict[tuple[str, str], bytes] = {}
        self.events: list[tuple[str, dict[str, Any]]] = []

    def put_artifact(self, rollout_id: str, name: str, data: bytes) -> None:
        self.blobs[rollout_id, name] = data

    def get_artifact(self, rollout_id: str, name: str, attempt: int | None = None) -> bytes:
        if (rollout_id, name) not in self.blobs:
            raise GatewayAPIError(404, f"no artifact {name}", "not_found")
        return self.blobs[rollout_id, name]

    def post_event(self, rollout_id: str, kind: Any, payload: dict[str, Any]) -> None:
        self.events.append((rollout_id, payload))


def runner(kube: FakeKube, concurrency: int = 4, artifacts: MemoryArtifacts | None = None,
           **settings) -> KubernetesRunner:
    config = KubernetesSettings(namespace=NS, api_url=kube.url, **{"image_pull_grace_s": 0.2, **settings})
    return KubernetesRunner(config, concurrency, artifacts or MemoryArtifacts())


def spec(tmp_path: Path, rollout_id: str = "r1", attempt: int = 1) -> RunSpec:
    return RunSpec(rollout_id=rollout_id, attempt=attempt, command=("python", "harness.py"),
                   base_url=f"http://gw:8100/r/{rollout_id}/v1", api_key=f"hrl.{rollout_id}", task={"id": rollout_id},
                   workdir=tmp_path, timeout_s=60, stdout_path=tmp_path / f"{rollout_id}.out",
                   stderr_path=tmp_path / f"{rollout_id}.err")


def terminated(code: int, reason: str = "Error") -> dict:
    return {"phase": "Failed", "containerStatuses": [{"name": "harness", "state": {
        "terminated": {"exitCode": code, "reason": reason}}}]}


FAILED = {"conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}], "failed": 1}


def test_create_success_logs_and_deletion(kube, tmp_path):
    artifacts = MemoryArtifacts()
    run = runner(kube, artifacts=artifacts)
    (tmp_path / "prepared.txt").write_text("layout")
    run.start(spec(tmp_path))
    assert ("r1", WORKDIR_ARCHIVE) in artifacts.blobs
    name = job_name("r1", 1)
    job, secret = kube.objects["jobs"][name], kube.objects["secrets"][secret_name("r1")]
    assert job["spec"]["backoffLimit"] == 0 and secret["stringData"]["api-key"] == "hrl.r1"
    assert run.poll() == [] and run.free_slots() == 3
    kube.add_pod(name, {"phase": "Succeeded"}, log="answer\n")
    kube.set_job_status(name, {"conditions": [{"type": "Complete", "status": "True"}], "succeeded": 1})
    [result] = run.poll()
    assert (result.rollout_id, result.termination, result.exit_code) == ("r1", Termination.EXITED, 0)
    assert (tmp_path / "r1.out").read_text() == "answer\n"
    [(rollout_id, note)] = artifacts.events  # no result.tar.gz came back: graded as prepared, and said so
    assert rollout_id == "r1" and "result.tar.gz" in note["message"]
    assert (tmp_path / "prepared.txt").read_text() == "layout"
    run.release("r1")
    assert kube.objects["jobs"] == {} and kube.objects["secrets"] == {} and kube.objects["pods"] == {}
    assert ("DELETE", f"/api/v1/namespaces/{NS}/secrets/{secret_name('r1')}") in kube.requests


@pytest.mark.parametrize(("job_status", "pod_status", "termination", "exit_code"), [
    (FAILED, terminated(3), Termination.EXITED, 3),
    (FAILED, terminated(137, "OOMKilled"), Termination.OOM_KILLED, None),
    (FAILED, terminated(139), Termination.CRASHED, None),
    (FAILED, {"phase": "Failed", "reason": "Evicted", "message": "low on memory"}, Termination.EVICTED, None),
    # past its own limits (the kubelet's messages): the agent wrote too much, not the node's failure
    (FAILED, {"phase": "Failed", "reason": "Evicted", "message": "Pod ephemeral local storage usage exceeds the total "
              "limit of containers 10Gi. "}, Termination.LIMIT_EXCEEDED, None),
    (FAILED, {"phase": "Failed", "reason": "Evicted", "message": 'Container harness exceeded its local ephemeral '
              'storage limit "10Gi". '}, Termination.LIMIT_EXCEEDED, None),
    (FAILED, {"phase": "Failed", "reason": "Evicted", "message": 'Usage of EmptyDir volume "workspace" exceeds the '
              'limit "10Gi". '}, Termination.LIMIT_EXCEEDED, None),
    (FAILED, {"phase": "Failed", "reason": "Evicted", "message": "The node was low on resource: ephemeral-storage. "},
     Termination.EVICTED, None),
    (FAILED, {"phase": "Failed", "reason": "Evicted", "message": "The node was low on resource: inodes. Threshold "
              "quantity: 1000, available: 10. Container harness was using 900000, request is 0, has larger "
              "consumption of inodes. "}, Termination.LIMIT_EXCEEDED, None),
    (FAILED, {"phase": "Failed", "conditions": [{"type": "DisruptionTarget", "status": "True"}]},
     Termination.EVICTED, None),
    (FAILED, {"phase": "Failed", "reason": "NodeLost"}, Termination.NODE_LOST, None),
    (FAILED, {"phase": "Failed", "initContainerStatuses": [{"name": "task", "state": {
        "terminated": {"exitCode": 1, "reason": "Error"}}}]}, Termination.START_FAILED, None),
    ({"conditions": [{"type": "Failed", "status": "True", "reason": "DeadlineExceeded"}]}, {"phase": "Running"},
     Termination.TIMED_OUT, None),
    (FAILED, None, Termination.NODE_LOST, None),
])
def test_failure_mapping(kube, tmp_path, job_status, pod_status, termination, exit_code):
    run = runner(kube)
    run.start(spec(tmp_path))
    name = job_name("r1", 1)
    if pod_status is not None:
        kube.add_pod(name, pod_status)
    kube.set_job_status(name, job_status)
    [result] = run.poll()
    assert (result.termination, result.exit_code) == (termination, exit_code), result.detail


def test_evicted_pod_ends_the_attempt_before_the_job_fails(kube, tmp_path):
    run = runner(kube)
    run.start(spec(tmp_path))
    kube.add_pod(job_name("r1", 1), {"phase": "Failed", "reason": "Evicted"})
    [result] = run.poll()
    assert result.termination == Termination.EVICTED
    assert job_name("r1", 1) not in kube.objects["jobs"]  # the runner deleted the orphaned Job


def test_image_pull_backoff_fails_to_start_after_the_grace_period(kube, tmp_path):
    import time

    run = runner(kube)
    run.start(spec(tmp_path))
    waiting = {"phase": "Pending", "containerStatuses": [{"name": "harness", "state": {
        "waiting": {"reason": "ImagePullBackOff", "message": "pull access denied"}}}]}
    kube.add_pod(job_name("r1", 1), waiting)
    assert run.poll() == []  # within the grace period
    time.sleep(0.3)
    [result] = run.poll()
    assert result.termination == Termination.START_FAILED and "ImagePullBackOff" in result.detail
    assert kube.objects["jobs"] == {}


def test_vanished_job_is_a_lost_attempt_and_cancel_deletes(kube, tmp_path):
    run = runner(kube)
    run.start(spec(tmp_path, "a"))
    run.start(spec(tmp_path, "b"))
    del kube.objects["jobs"][job_name("a", 1)]
    run.cancel("b")
    results = {r.rollout_id: r.termination for r in run.poll()}
    assert results == {"a": Termination.NODE_LOST, "b": Termination.CANCELLED}
    assert kube.objects["jobs"] == {}
    run.close()
    assert kube.objects["secrets"] == {}


def test_create_errors_are_start_errors_and_an_existing_secret_is_reused(kube, tmp_path):
    run = runner(kube)
    kube.fail_next[("POST", "jobs")] = 403
    with pytest.raises(RunnerStartError, match="403"):
        run.start(spec(tmp_path))
    assert run.free_slots() == 4
    run.start(spec(tmp_path))  # the Secret from the failed try exists: kept (the key is the same)
    assert job_name("r1", 1) in kube.objects["jobs"]


def test_a_failed_workdir_upload_is_a_start_error_and_creates_nothing(kube, tmp_path):
    class Refusing(MemoryArtifacts):
        def put_artifact(self, rollout_id: str, name: str, data: bytes) -> None:
            raise GatewayAPIError(413, "request body exceeds the limit", "payload_too_large")

    run = runner(kube, artifacts=Refusing())
    with pytest.raises(RunnerStartError, match="413.*max_body_bytes"):
        run.start(spec(tmp_path))
    assert kube.objects["jobs"] == {} and kube.objects["secrets"] == {}


def test_creation_is_rate_limited_and_bounded(kube, tmp_path):
    run = runner(kube, concurrency=10, creates_per_s=0.01, create_burst=2)
    run.start(spec(tmp_path, "a"))
    run.start(spec(tmp_path, "b"))
    assert run.free_slots() == 0
    with pytest.raises(RunnerFullError):
        run.start(spec(tmp_path, "c"))
    assert len(kube.objects["jobs"]) == 2


@pytest.mark.parametrize(("status", "ending"), [
    ({}, None),
    ({"phase": "Running", "containerStatuses": [{"state": {"running": {}}}]}, None),
    ({"containerStatuses": [{"state": {"waiting": {"reason": "ContainerCreating"}}}]}, None),
    ({"containerStatuses": [{"state": {"waiting": {"reason": "ErrImagePull"}}}]}, Termination.START_FAILED),
    ({"containerStatuses": [{"state": {"waiting": {"reason": "CreateContainerConfigError"}}}]},
     Termination.START_FAILED),
    ({"containerStatuses": [{"state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}]}, None),
    ({"containerStatuses": [{"state": {"terminated": {"exitCode": 127, "reason": "Error"}}}]}, Termination.EXITED),
    ({"containerStatuses": [{"state": {"terminated": {"exitCode": 127, "reason": "Error", "message":
      "harnessrl: the harness command could not start: ['nope']"}}}]}, Termination.START_FAILED),
])
def test_pod_ending_table(status, ending):
    result = pod_ending({"status": status})
    assert (result[0] if result else None) == ending


def test_running_job_has_no_ending():
    assert job_ending({"status": {"active": 1}}, [{"status": {"phase": "Running"}}]) is None


def test_each_attempt_replaces_the_key_secret_left_by_the_previous_one(kube, tmp_path):
    """A rollout key is bound to its attempt: attempt 2's Job must not mount attempt 1's key."""
    run = runner(kube)
    run.start(spec(tmp_path, attempt=1))
    run.cancel("r1")
    run.poll()
    second = dataclasses.replace(spec(tmp_path, attempt=2), api_key="hrl.r1.attempt-2")
    run.start(second)
    assert kube.objects["secrets"][secret_name("r1")]["stringData"]["api-key"] == "hrl.r1.attempt-2"


def test_a_restarted_controller_deletes_only_the_jobs_of_its_previous_life_it_does_not_hold(kube, tmp_path):
    before = KubernetesRunner(KubernetesSettings(namespace=NS, api_url=kube.url), 4, MemoryArtifacts(),
                              controller_id="ctl-a")
    neighbour = KubernetesRunner(KubernetesSettings(namespace=NS, api_url=kube.url), 4, MemoryArtifacts(),
                                 controller_id="ctl-b")
    for rollout_id in ("orphan", "kept"):
        before.start(spec(tmp_path, rollout_id))
    neighbour.start(spec(tmp_path, "neighbours"))
    restarted = runner(kube)  # a new process: knows nothing of the Jobs above
    reaped = restarted.reap_orphans("ctl-a", held={"kept"})
    restarted.start(spec(tmp_path, "new"))
    jobs = kube.objects["jobs"]
    assert reaped == ["orphan"] and job_name("orphan", 1) not in jobs
    assert {job_name("kept", 1), job_name("neighbours", 1), job_name("new", 1)} <= set(jobs)
    assert jobs[job_name("new", 1)]["metadata"]["labels"][CONTROLLER_LABEL] == "ctl-a"
    assert restarted.reap_orphans("ctl-a", held=set()) == ["kept"]  # its own new Job is never an orphan


def test_releasing_an_old_attempt_keeps_the_secret_of_the_attempt_that_took_over(kube, tmp_path):
    """Controller A's attempt 1 ended (its lease was lost) while controller B started attempt 2: A's clean-up must not
    delete the Secret that now holds attempt 2's key."""
    first, second = runner(kube), runner(kube)
    first.start(spec(tmp_path, attempt=1))
    first.cancel("r1")
    first.poll()
    second.start(dataclasses.replace(spec(tmp_path, attempt=2), api_key="hrl.r1.attempt-2"))
    first.release("r1")
    kept = kube.objects["secrets"][secret_name("r1")]
    assert kept["stringData"]["api-key"] == "hrl.r1.attempt-2"
    second.cancel("r1")
    second.poll()
    second.release("r1")
    assert secret_name("r1") not in kube.objects["secrets"]
