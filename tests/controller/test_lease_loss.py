"""The controller's side of writes fenced by attempt (issue 12, point 4), with the KubernetesRunner against the fake
API server and the in-process gateway (no process is started): a controller that loses a lease deletes that Job
first and reports nothing; a restarted controller deletes the Jobs of its previous life; a report for an attempt
that is no longer current changes nothing."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest

from controller.attempt import Attempt
from controller.config import ControllerConfig, KubernetesSettings
from controller.reconcile import Reconciler
from controller.report import report_attempt
from controller.runners.base import RunResult, RunSpec, Termination
from controller.runners.kubernetes import KubernetesRunner
from controller.runners.manifests import job_name
from gateway.client import GatewayClient
from gateway.records import RolloutSpec, RolloutState
from tests.controller.fake_kube import FakeKube
from tests.controller.support import ScriptRecipe
from tests.controller.test_kubernetes_runner import MemoryArtifacts

RECIPES = {"script": ScriptRecipe()}
NS = "agents"


@pytest.fixture
def kube():
    with FakeKube() as fake:
        yield fake


def config(tmp_path: Path, controller_id: str) -> ControllerConfig:
    return ControllerConfig(controller_id=controller_id, concurrency=2, lease_s=30.0, renew_every_s=0.05,
                            poll_interval_s=0.05, kill_grace_s=0.2, work_dir=tmp_path / "work",
                            logs_dir=tmp_path / "logs")


def reconciler(kube: FakeKube, admin: GatewayClient, grader: GatewayClient, cfg: ControllerConfig) -> Reconciler:
    runner = KubernetesRunner(KubernetesSettings(namespace=NS, api_url=kube.url), cfg.concurrency, MemoryArtifacts())
    return Reconciler(cfg, admin, grader, runner, recipes=RECIPES.__getitem__)


def create(admin: GatewayClient) -> str:
    rollout_id = f"lease-{uuid.uuid4().hex[:8]}"
    admin.create_rollouts([RolloutSpec(id=rollout_id, group_id="g", input={"recipe": "script", "mode": "ok"})])
    return rollout_id


def test_a_lost_lease_deletes_the_job_first_and_reports_nothing(kube, admin, grader, tmp_path) -> None:
    rollout_id = create(admin)
    rec = reconciler(kube, admin, grader, config(tmp_path, "ctl-lost"))
    rec.tick()
    name = job_name(rollout_id, 1)
    assert name in kube.objects["jobs"]
    admin.set_state(rollout_id, RolloutState.QUEUED, error="lease expired")  # as the gateway does on expiry
    (stolen,) = admin.claim("thief")
    time.sleep(0.1)
    rec.tick()  # the renewal is refused (409): the Job goes at once
    assert name not in kube.objects["jobs"]
    rec.tick()  # the runner reports the cancelled attempt, which is dropped, not reported
    after = admin.get_rollout(rollout_id)
    assert (rec.stats.lost, rec.stats.reported) == (1, {})
    assert (stolen.attempt, after.state, after.attempt, after.lease_owner, after.reward) == (
        2, RolloutState.RUNNING, 2, "thief", None)
    rec.shutdown(wait_s=1)


def test_a_restarted_controller_deletes_the_jobs_of_its_previous_life(kube, admin, grader, tmp_path) -> None:
    rollout_id = create(admin)
    first_life = reconciler(kube, admin, grader, config(tmp_path, "ctl-restarted"))
    first_life.tick()
    assert job_name(rollout_id, 1) in kube.objects["jobs"]
    second_life = reconciler(kube, admin, grader, config(tmp_path, "ctl-restarted"))  # same identity, no memory
    second_life.tick()
    assert job_name(rollout_id, 1) not in kube.objects["jobs"]
    second_life.shutdown(wait_s=1)  # the first life is never shut down: it died


def test_a_report_for_an_attempt_that_is_no_longer_current_changes_nothing(admin, grader, tmp_path) -> None:
    rollout_id = create(admin)
    (first,) = [r for r in admin.claim("ctl-late") if r.id == rollout_id]
    admin.set_state(rollout_id, RolloutState.QUEUED, error="lease expired")
    admin.claim("ctl-next")
    workdir = tmp_path / "w"
    workdir.mkdir()
    (workdir / "prepared.txt").write_text("ok")
    spec = RunSpec(rollout_id=rollout_id, attempt=1, command=("true",), base_url="", api_key="", task={},
                   workdir=workdir, timeout_s=1, stdout_path=tmp_path / "o", stderr_path=tmp_path / "e")
    result = RunResult(rollout_id, 1, Termination.EXITED, 0, "exited with code 0", 0.1)
    outcome = report_attempt(Attempt(first, RECIPES["script"], spec), result, admin, grader, "ctl-late")
    after = admin.get_rollout(rollout_id)
    assert outcome is None
    assert (after.state, after.attempt, after.lease_owner, after.reward) == (RolloutState.RUNNING, 2, "ctl-next", None)
