"""Failures stay the agent's when grading: a grader that raises on what the attempt left, and details no JSON store
would take, end as the agent's reward 0 on the first attempt; only the grader's own infrastructure is `infra`."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from controller.config import ControllerConfig
from controller.recipe import Grade, GradeInput, GraderInfraError
from controller.reconcile import Reconciler
from controller.report import failure_reward, refused_grade
from controller.reward_details import MAX_DETAILS_BYTES, safe_details
from controller.runners.local import LocalRunner
from gateway.client import GatewayClient
from gateway.records import EventKind, FailureKind, RolloutSpec, RolloutState
from sandbox import SandboxError
from sandbox.hostile_tree import TreeProblem
from tests.controller.support import ScriptRecipe
from tests.gateway.support import ADMIN_TOKEN

pytestmark = pytest.mark.slow  # harness processes through the local runner

HOSTILE_DETAILS = {"name": "bad\udcff\udcfe.py", "nul": "a\x00b", "big": 1 << 80, "nan": float("nan"),
                   "inf": float("-inf"), "tuple": (1, 2), "set": {3}, "object": object(), 7: "int key",
                   "deep": [[[[[[[[[[[[[[[[[[[["x"]]]]]]]]]]]]]]]]]]]], "huge": "y" * (8 << 20)}


@dataclass
class RaisingRecipe(ScriptRecipe):
    """ScriptRecipe whose grader raises `error`, or returns `details`."""

    error: BaseException | None = None
    details: dict[str, Any] | None = None

    def grade(self, graded: GradeInput) -> Grade:
        if self.error is not None:
            raise self.error
        return Grade(0.5, self.details or {})


def run(gateway, grader, tmp_path: Path, recipe: RaisingRecipe) -> tuple[Any, list[Any]]:
    cfg = ControllerConfig(controller_id=f"ctl-{uuid.uuid4().hex[:6]}", concurrency=1, lease_s=30.0,
                           renew_every_s=5.0, poll_interval_s=0.1, harness_timeout_s=60.0, kill_grace_s=0.5,
                           work_dir=tmp_path / "work", logs_dir=tmp_path / "logs")
    rollout_id = f"r-{uuid.uuid4().hex[:8]}"
    with GatewayClient(gateway.url, ADMIN_TOKEN) as admin:
        admin.create_rollouts([RolloutSpec(id=rollout_id, group_id=rollout_id, max_attempts=3,
                                           input={"recipe": recipe.name, "mode": "ok"})])
        Reconciler(cfg, admin, grader, LocalRunner(1, kill_grace_s=0.5), recipes=lambda _: recipe).run(
            until_idle=True)
        return admin.get_rollout(rollout_id), admin.list_events(rollout_id)


@pytest.mark.parametrize("error", [ValueError("the agent's tree broke me"), UnicodeEncodeError(
    "utf-8", "\udcff", 0, 1, "surrogates not allowed"), RecursionError("deep"), KeyError("x")])
def test_a_grader_that_raises_on_the_attempt_is_the_agents_failure_with_reward_zero(gateway, grader, tmp_path,
                                                                                     error):
    rollout, events = run(gateway, grader, tmp_path, RaisingRecipe(error=error))
    assert (rollout.state, rollout.failure_kind, rollout.attempt, rollout.reward) == (
        RolloutState.FAILED, FailureKind.AGENT, 1, 0.0)
    rewards = [e.payload for e in events if e.kind == EventKind.REWARD]
    assert rewards[-1]["details"]["grader_error"] == type(error).__name__


@dataclass
class ScaledRecipe(RaisingRecipe):
    """A grader whose scale goes down to -1: its failure must not pay more than its worst verdict."""

    failure_reward: float = -1.0


def test_a_grader_failure_pays_the_recipes_failure_reward_not_zero(gateway, grader, tmp_path):
    rollout, events = run(gateway, grader, tmp_path, ScaledRecipe(error=ValueError("a FIFO blocked me")))
    assert (rollout.state, rollout.failure_kind, rollout.attempt, rollout.reward) == (
        RolloutState.FAILED, FailureKind.AGENT, 1, -1.0)
    problem = TreeProblem("unreadable", "'answer.txt' is a FIFO")
    assert refused_grade(problem, failure_reward(ScaledRecipe()))[0].reward == -1.0
    assert failure_reward(RaisingRecipe()) == 0.0  # the default
    with pytest.raises(TypeError, match="failure_reward must be a finite number"):
        failure_reward(ScaledRecipe(failure_reward=float("-inf")))


@pytest.mark.parametrize("error", [GraderInfraError("the store is gone"), SandboxError("no bwrap")])
def test_the_graders_own_infrastructure_failing_is_infra(gateway, grader, tmp_path, error):
    rollout, events = run(gateway, grader, tmp_path, RaisingRecipe(error=error))
    assert (rollout.state, rollout.failure_kind, rollout.reward) == (RolloutState.FAILED, FailureKind.INFRA, None)
    states = [e.payload for e in events if e.kind == EventKind.STATE and e.payload.get("state") == "failed"]
    assert states[-1]["reason"] == "grader_crashed"  # the infra rate per cause shows it


def test_details_no_store_would_take_are_made_safe_and_the_reward_lands(gateway, grader, tmp_path):
    rollout, events = run(gateway, grader, tmp_path, RaisingRecipe(details=HOSTILE_DETAILS))
    assert (rollout.state, rollout.attempt, rollout.reward) == (RolloutState.SUCCEEDED, 1, 0.5)
    details = [e.payload for e in events if e.kind == EventKind.REWARD][-1]["details"]
    assert details["big"] == str(1 << 80) and details["nan"] == "nan" and details["7"] == "int key"
    assert details["name"].startswith("bad") and "\udcff" not in details["name"] and "\x00" not in details["nul"]


def test_safe_details_bounds_the_size_and_keeps_the_flags():
    many = {"resolved": False, "tamper": True, **{f"k{i}": "z" * 100 for i in range(100_000)}}
    safe = safe_details(many, max_bytes=1 << 20)
    assert safe["tamper"] is True and "details_left_out" in safe
    one_huge = safe_details({"model_patch": "p" * (20 << 20)})
    assert len(one_huge["model_patch"]) < MAX_DETAILS_BYTES and "cut by the controller" in one_huge["model_patch"]
