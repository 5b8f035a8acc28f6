"""End to end, no mocks in the path: gateway + embedded engine (tiny model) + controller with LocalRunner running 2
rollouts of each recipe on 6 slots, plus a harness that crashes and one that hangs (8 rollouts in all: more than the
slots, so some wait for a free one).

Every rollout must reach a terminal state, the recipes' calls must be recorded with token IDs, every graded rollout must
carry a reward posted with the grader credential, and the crash and the hang must end as `agent` failures.

The SWE tasks are generated from the tiny local project of tests/recipes/swe (HARNESSRL_SWE_SOURCE) rather than the
recipe's default `pypi:xmltodict`: the same generation, harness and grading path without the package index, with 5
tests to run per bug candidate and per grade instead of ~70 (the sdist path is tested in
tests/recipes/swe/test_generator.py).
"""

from __future__ import annotations

import uuid

import pytest

from controller.config import ControllerConfig
from controller.recipes import get_recipe
from controller.reconcile import Reconciler
from controller.runners.local import LocalRunner
from gateway.client import GatewayClient
from gateway.records import EventKind, FailureKind, RolloutSpec, RolloutState
from tests.controller.support import ScriptRecipe
from tests.gateway.support import ADMIN_TOKEN, GRADER_TOKEN, GatewayProcess
from tests.recipes.swe.conftest import write_tiny_project

pytestmark = pytest.mark.slow
PER_RECIPE = 2  # each SWE harness alone spends about 8 CPU-seconds importing litellm
RECIPE_NAMES = ("instruction_following", "search", "swe")
SMALL = {"max_tokens": 48}  # the tiny model writes noise: keep each call short
SWE_SMALL = {"step_limit": 3, "max_tokens": 48, "command_timeout_s": 20}


def recipes(name: str):
    return ScriptRecipe() if name == "script" else get_recipe(name)


@pytest.fixture(scope="module")
def swe_store(tmp_path_factory, monkeypatch_module):
    store = tmp_path_factory.mktemp("swe-store")
    monkeypatch_module.setenv("HARNESSRL_SWE_STORE", str(store))
    source = write_tiny_project(tmp_path_factory.mktemp("swe-src") / "tinymath")
    monkeypatch_module.setenv("HARNESSRL_SWE_SOURCE", str(source))
    return store


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as patch:
        yield patch


def tasks_for(name: str, seed: int) -> list[dict]:
    if name == "swe":
        from recipes.swe.recipe import SweRecipe

        return [{**task, **SWE_SMALL, "recipe": name} for task in SweRecipe().generate(PER_RECIPE, seed)]
    return [{**task, **SMALL, "recipe": name} for task in get_recipe(name).generate(PER_RECIPE, seed)]


def test_controller_runs_every_recipe_through_gateway_and_engine(tmp_path, engine_url, swe_store):
    gw = GatewayProcess(tmp_path / "store.db").start()
    try:
        with GatewayClient(gw.url, ADMIN_TOKEN) as admin, GatewayClient(gw.url, GRADER_TOKEN) as grader:
            admin.register_model("policy", engine_url + "/v1", served_name="tiny")
            specs = [RolloutSpec(id=f"{name}-{i}", group_id=f"{name}-{task['id']}", input=task)
                     for name in RECIPE_NAMES for i, task in enumerate(tasks_for(name, seed=1))]
            specs += [RolloutSpec(id=f"script-{mode}", group_id="script", max_attempts=1,
                                  input={"recipe": "script", "mode": mode, "harness_timeout_s": 5})
                      for mode in ("crash", "hang")]
            admin.create_rollouts(specs)
            config = ControllerConfig(controller_id=f"e2e-{uuid.uuid4().hex[:6]}", concurrency=6, lease_s=60.0,
                                      renew_every_s=10.0, poll_interval_s=0.1, harness_timeout_s=240.0,
                                      kill_grace_s=1.0, work_dir=tmp_path / "work", logs_dir=tmp_path / "logs")
            runner = LocalRunner(config.concurrency, kill_grace_s=config.kill_grace_s)
            reconciler = Reconciler(config, admin, grader, runner, recipes=recipes)
            reconciler.run(until_idle=True)

            rollouts = {spec.id: admin.get_rollout(spec.id) for spec in specs}
            assert all(r.state in (RolloutState.SUCCEEDED, RolloutState.FAILED) for r in rollouts.values()), \
                {r.id: r.state for r in rollouts.values()}
            for name in RECIPE_NAMES:
                for i in range(PER_RECIPE):
                    rollout = rollouts[f"{name}-{i}"]
                    assert rollout.state == RolloutState.SUCCEEDED, (rollout.id, rollout.error)
                    assert rollout.reward is not None and 0.0 <= rollout.reward <= 1.0
                    calls = admin.calls(rollout.id)
                    assert calls and all(c.prompt_token_ids and c.response_token_ids for c in calls
                                         if c.status == "ok"), rollout.id
                    rewards = [e for e in admin.list_events(rollout.id) if e.kind == EventKind.REWARD]
                    assert len(rewards) == 1 and rewards[0].payload["reward"] == rollout.reward
            crash, hang = rollouts["script-crash"], rollouts["script-hang"]
            assert (crash.state, crash.failure_kind) == (RolloutState.FAILED, FailureKind.AGENT)
            assert (hang.state, hang.failure_kind) == (RolloutState.FAILED, FailureKind.AGENT)
            assert "time" in (hang.error or ""), hang.error
    finally:
        gw.stop()
