"""The reconcile loop end to end: a real gateway in front of the scripted upstream, harness processes, real grading."""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from controller.config import ControllerConfig
from controller.reconcile import Reconciler
from controller.runners.local import LocalRunner
from gateway.client import GatewayClient
from gateway.records import EventKind, FailureKind, Rollout, RolloutSpec, RolloutState
from tests.controller.support import FlakyStartRunner, ScriptRecipe
from tests.gateway.support import ADMIN_TOKEN

pytestmark = pytest.mark.slow  # the reconcile loop with real harness processes through the LocalRunner

RECIPES = {"script": ScriptRecipe(), "script-grading": ScriptRecipe(name="script-grading", grade_agent_failures=True)}


class AdminThatNeverRewards(GatewayClient):
    """The admin client the controller gets: rewards must go through the grader client."""

    def post_reward(self, *args: Any, **kwargs: Any) -> Rollout:
        raise AssertionError("the reward was posted with the admin credential, not the grader's")


def config(tmp_path: Path, **overrides: Any) -> ControllerConfig:
    settings = {"controller_id": f"ctl-{uuid.uuid4().hex[:6]}", "concurrency": 4, "lease_s": 30.0,
                "renew_every_s": 5.0, "poll_interval_s": 0.1, "harness_timeout_s": 60.0, "kill_grace_s": 0.5,
                "work_dir": tmp_path / "work", "logs_dir": tmp_path / "logs", **overrides}
    return ControllerConfig(**settings)


def create(admin: GatewayClient, tasks: list[dict[str, Any]], max_attempts: int = 3) -> list[str]:
    group = f"g-{uuid.uuid4().hex[:8]}"
    specs = [RolloutSpec(id=f"{group}-{i}", group_id=group, input={"recipe": "script", **task},
                         max_attempts=max_attempts) for i, task in enumerate(tasks)]
    admin.create_rollouts(specs)
    return [spec.id for spec in specs]


def reconcile_all(gateway, grader, tmp_path: Path, runner=None, **overrides: Any) -> Reconciler:
    cfg = config(tmp_path, **overrides)
    admin = AdminThatNeverRewards(gateway.url, ADMIN_TOKEN)
    reconciler = Reconciler(cfg, admin, grader, runner or LocalRunner(cfg.concurrency, kill_grace_s=cfg.kill_grace_s),
                            recipes=RECIPES.__getitem__)
    reconciler.run(until_idle=True)
    admin.close()
    return reconciler


def events(admin: GatewayClient, rollout_id: str, kind: EventKind) -> list[dict[str, Any]]:
    return [e.payload for e in admin.list_events(rollout_id) if e.kind == kind]


def test_every_rollout_ends_with_the_right_state_kind_and_reward(gateway, admin, grader, tmp_path):
    # Only the hanging harness has a short limit (its task's own): the others import openai, which takes 10-20 s on a
    # loaded 2-core machine.
    tasks = [{"mode": "ok"}, {"mode": "ok"}, {"mode": "exit3"}, {"mode": "crash"},
             {"mode": "hang", "harness_timeout_s": 5}, {"mode": "env"}, {"mode": "exit3", "recipe": "script-grading"},
             {"mode": "ok", "recipe": "nope"}]
    ids = create(admin, tasks)
    reconciler = reconcile_all(gateway, grader, tmp_path)
    got = {i: admin.get_rollout(i) for i in ids}
    # an agent failure the grader does not see carries the recipe's failure_reward (0 here), the bottom of its scale
    expected = [(RolloutState.SUCCEEDED, None, 1.0), (RolloutState.SUCCEEDED, None, 1.0),
                (RolloutState.FAILED, FailureKind.AGENT, 0.0), (RolloutState.FAILED, FailureKind.AGENT, 0.0),
                (RolloutState.FAILED, FailureKind.AGENT, 0.0), (RolloutState.SUCCEEDED, None, 0.0),
                (RolloutState.FAILED, FailureKind.AGENT, 1.0), (RolloutState.FAILED, FailureKind.INFRA, None)]
    assert [(got[i].state, got[i].failure_kind, got[i].reward) for i in ids] == expected
    assert "exited with code 3" in got[ids[2]].error and "SIGABRT" in got[ids[3]].error
    assert "timed_out" in got[ids[4]].error and "unknown" not in got[ids[4]].error
    assert "'nope'" in got[ids[7]].error and got[ids[7]].attempt == 1
    assert events(admin, ids[7], EventKind.STATE)[-1]["reason"] == "recipe_unavailable"
    assert reconciler.stats.reported == {"succeeded": 3, "failed:agent": 4, "failed:infra": 1}
    [reward] = events(admin, ids[0], EventKind.REWARD)
    assert reward == {"reward": 1.0, "details": {"calls": 1, "prepared": "ok", "exit_code": 0}}
    assert len(admin.calls(ids[0], attempt=1)) == 1
    # agent failures are not graded by default: the recipe's failure reward is posted, saying it was not graded
    (failed,) = events(admin, ids[2], EventKind.REWARD)
    assert failed["reward"] == 0.0 and failed["details"]["graded"] is False
    assert "exited with code 3" in failed["details"]["error"]
    assert events(admin, ids[6], EventKind.REWARD)[0]["details"]["exit_code"] == 3


def test_logs_are_kept_linked_and_the_harness_sees_only_the_contract(gateway, admin, grader, tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESSRL_ADMIN_TOKEN", ADMIN_TOKEN)
    [ok, env] = create(admin, [{"mode": "ok"}, {"mode": "env"}])
    reconcile_all(gateway, grader, tmp_path)
    [log] = events(admin, env, EventKind.LOG)
    names = Path(log["stdout"]).read_text().split()
    assert {"OPENAI_BASE_URL", "OPENAI_API_KEY", "HARNESSRL_TASK", "HOME"} <= set(names)
    assert not [n for n in names if "ADMIN" in n or "GRADER" in n]
    assert Path(log["path"]) == (tmp_path / "logs").resolve()
    assert Path(events(admin, ok, EventKind.LOG)[0]["stdout"]).read_text() == "tttt\n"
    assert not list((tmp_path / "work").iterdir())  # working directories are removed after grading


def test_infra_start_failure_is_retried_and_then_succeeds(gateway, admin, grader, tmp_path):
    ids = create(admin, [{"mode": "ok"}, {"mode": "ok"}])
    [last_chance] = create(admin, [{"mode": "ok"}], max_attempts=1)
    runner = FlakyStartRunner(4, kill_grace_s=0.5)
    reconcile_all(gateway, grader, tmp_path, runner=runner)
    for rollout_id in ids:
        rollout = admin.get_rollout(rollout_id)
        assert (rollout.state, rollout.attempt, rollout.reward) == (RolloutState.SUCCEEDED, 2, 1.0)
        states = [e["state"] for e in events(admin, rollout_id, EventKind.STATE)]
        assert states == ["running", "queued", "running", "succeeded"]
        assert admin.calls(rollout_id, attempt=1) == [] and len(admin.calls(rollout_id, attempt=2)) == 1
    rollout = admin.get_rollout(last_chance)
    assert (rollout.state, rollout.failure_kind, rollout.attempt) == (RolloutState.FAILED, FailureKind.INFRA, 1)
    assert "unavailable (test)" in rollout.error and "all 1 attempts used" in rollout.error


def test_unreachable_engine_is_an_infra_failure_retried_until_attempts_are_spent(gateway, admin, grader, tmp_path):
    [rollout_id] = create(admin, [{"mode": "call_then_fail", "model": "dead"}], max_attempts=2)
    reconcile_all(gateway, grader, tmp_path)
    rollout = admin.get_rollout(rollout_id)
    assert (rollout.state, rollout.failure_kind, rollout.attempt) == (RolloutState.FAILED, FailureKind.INFRA, 2)
    assert "engine unreachable" in rollout.error and rollout.reward is None
    assert [e["state"] for e in events(admin, rollout_id, EventKind.STATE)] == ["running", "queued", "running",
                                                                                 "failed"]


def test_two_controllers_never_start_a_rollout_twice(gateway, admin, grader, tmp_path):
    tasks = [{"mode": "ok"} for _ in range(8)]  # a second start would make a second call (the sandbox lets a
    # harness write only its own working directory, so the harnesses cannot leave markers in a shared folder)
    ids = create(admin, tasks)
    reconcilers: list[Reconciler] = []

    def controller(name: str) -> None:
        reconcilers.append(reconcile_all(gateway, grader, tmp_path / name, concurrency=3))

    threads = [threading.Thread(target=controller, args=(name,)) for name in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    for rollout_id in ids:
        rollout = admin.get_rollout(rollout_id)
        assert (rollout.state, rollout.attempt, rollout.reward) == (RolloutState.SUCCEEDED, 1, 1.0), rollout
        assert [e["state"] for e in events(admin, rollout_id, EventKind.STATE)] == ["running", "succeeded"]
        assert len(admin.calls(rollout_id)) == 1
    assert sum(r.stats.started for r in reconcilers) == 8


def test_a_lost_lease_kills_the_harness_first_and_reports_nothing(gateway, admin, grader, tmp_path):
    """The attack: an orphaned harness of an expired lease went on into the next attempt. The controller that learns
    it lost the lease (409 on renewal) stops the harness at once; nothing of it is reported."""
    [rollout_id] = create(admin, [{"mode": "hang"}])
    cfg = config(tmp_path, renew_every_s=0.2)
    client = AdminThatNeverRewards(gateway.url, ADMIN_TOKEN)
    reconciler = Reconciler(cfg, client, grader, LocalRunner(cfg.concurrency, kill_grace_s=cfg.kill_grace_s),
                            recipes=RECIPES.__getitem__)
    reconciler.tick()
    assert reconciler.stats.started == 1
    admin.set_state(rollout_id, RolloutState.QUEUED, error="lease expired")  # as the gateway does on expiry
    admin.claim("thief")
    deadline = time.monotonic() + 15
    while reconciler.stats.lost == 0 and time.monotonic() < deadline:
        reconciler.tick()
        time.sleep(0.1)
    after = admin.get_rollout(rollout_id)
    reconciler.shutdown(wait_s=2)
    client.close()
    assert (reconciler.stats.lost, reconciler.stats.reported) == (1, {})
    assert (after.state, after.attempt, after.lease_owner, after.reward) == (RolloutState.RUNNING, 2, "thief", None)
