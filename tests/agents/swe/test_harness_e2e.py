"""mini-swe-agent on a generated task against the real gateway in front of the real embedded engine (tiny model, slow):
its calls are recorded with token IDs and its diff is graded in a fresh copy."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from agents.swe.recipe import SweRecipe, rollout_input
from controller.recipe import TASK_FILE, GradeInput
from gateway.client import GatewayClient
from gateway.records import RolloutSpec
from tests.conftest import TINY_SERVED_NAME
from tests.gateway.support import ADMIN_TOKEN, GatewayProcess

pytestmark = pytest.mark.slow


def test_mini_swe_agent_through_the_gateway_is_recorded_and_graded(tiny_store, engine_url, tmp_path):
    store, instances = tiny_store
    recipe = SweRecipe(store=store, source="unused")
    task = rollout_input(instances[0], store) | {"model": TINY_SERVED_NAME, "step_limit": 3, "max_tokens": 48}
    workdir = tmp_path / "work"
    workdir.mkdir()
    (workdir / TASK_FILE).write_text(json.dumps(task))
    recipe.prepare_workdir(task, workdir)
    gw = GatewayProcess(tmp_path / "store.db").start()
    try:
        with GatewayClient(gw.url, ADMIN_TOKEN) as admin:
            admin.register_model(TINY_SERVED_NAME, engine_url + "/v1")
            created = admin.create_rollouts([RolloutSpec(id="swe-e2e", group_id="g", input=task)])[0]
            env = {**os.environ, "OPENAI_BASE_URL": created.base_url, "OPENAI_API_KEY": created.api_key,
                   "HARNESSRL_TASK": str(workdir / TASK_FILE)}
            harness = subprocess.run(recipe.harness_command(), cwd=workdir, env=env, capture_output=True, text=True,
                                     timeout=300)
            calls = admin.calls(created.id)
    finally:
        gw.stop()
    assert harness.returncode == 0, harness.stderr[-3000:]
    assert json.loads(harness.stdout.strip().splitlines()[-1])["exit_status"]
    assert 1 <= len(calls) <= 3
    for call in calls:
        assert call.status == "ok" and call.model == TINY_SERVED_NAME
        assert call.prompt_token_ids and call.response_token_ids
        assert call.request["messages"][0]["role"] == "system"
    assert instances[0]["problem_statement"] in calls[0].request["messages"][1]["content"]
    grade = recipe.grade(GradeInput(task=task, workdir=workdir, calls=calls, exit_code=harness.returncode))
    assert grade.reward == 0.0 and grade.details["resolved"] is False
    assert "fail_to_pass_failed" in grade.details and "patch_error" not in grade.details
