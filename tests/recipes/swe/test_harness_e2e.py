"""mini-swe-agent on a generated task: inside the LocalRunner's sandbox with its commands in their own (fast, a scripted
model behind a fake gateway path), and against the real gateway in front of the real embedded engine (tiny model,
slow): its calls are recorded with token IDs and its diff is graded in a fresh copy."""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest

from controller.recipe import TASK_FILE, GradeInput
from controller.runners.base import RunSpec
from controller.runners.local import LocalRunner
from gateway.client import GatewayClient
from gateway.records import RolloutSpec
from recipes.swe.recipe import SweRecipe, rollout_input
from tests.conftest import TINY_SERVED_NAME
from tests.gateway.support import ADMIN_TOKEN, GatewayProcess
from tests.recipes.swe.completion_server import CompletionServer

# What the scripted model does: try to get out of the command sandbox, then fix nothing and submit.
ATTACK = ("id -u; cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n' | grep -c OPENAI_API_KEY; ls {store} || echo "
          "no-store; echo forged > ../trajectory.json || echo no-workdir; python3 -c 'import socket; "
          "socket.create_connection((\"127.0.0.1\", 18080), timeout=2)' 2>/dev/null || echo no-gateway; kill -9 -1")


def scripted_model(actions: list[str], fence: str = "mswea_bash_command") -> CompletionServer:
    """Answers the n-th call with the n-th action (the last one after that) in a `fence` block."""
    return CompletionServer(lambda n: f"THOUGHT: go.\n\n```{fence}\n{actions[min(n, len(actions)) - 1]}\n```")


@pytest.mark.slow  # a harness start: importing mini-swe-agent (and litellm, in mini_textbased) costs 2-20 s of CPU
@pytest.mark.skipif(os.geteuid() != 0, reason="the local runner's sandbox is started as root")
@pytest.mark.parametrize(("harness_config", "fence"),
                         [("mini_textbased", "mswea_bash_command"), ("one_command", "bash")])
def test_harness_inside_the_runner_sandbox_runs_each_command_in_its_own(tiny_store, tmp_path, harness_config, fence):
    """In each configuration (their model classes differ: litellm's, and the project's over plain HTTP)."""
    store, instances = tiny_store
    recipe = SweRecipe(store=store, source="unused")
    task = rollout_input(instances[0], store) | {"step_limit": 4, "command_timeout_s": 20,
                                                 "harness_config": harness_config}
    workdir = tmp_path / "work"
    workdir.mkdir()
    (workdir / TASK_FILE).write_text(json.dumps(task))
    recipe.prepare_workdir(task, workdir)
    model = scripted_model([ATTACK.format(store=store), "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"], fence)
    runner = LocalRunner(1)
    spec = RunSpec(rollout_id="swe1", attempt=1, command=tuple(recipe.harness_command()),
                   base_url=f"{model.url}/r/swe1/v1", api_key="rk-swe1-secret", task=task, workdir=workdir,
                   timeout_s=120, stdout_path=tmp_path / "out.log", stderr_path=tmp_path / "err.log")
    runner.start(spec)
    deadline = time.monotonic() + 120
    while not (results := runner.poll()):
        assert time.monotonic() < deadline, "the harness did not end"
        time.sleep(0.05)
    model.close()
    assert results[0].exit_code == 0, (tmp_path / "err.log").read_text()[-3000:]
    assert json.loads((tmp_path / "out.log").read_text().splitlines()[-1])["exit_status"] == "Submitted"
    observation = model.requests[1]["messages"][-1]["content"]
    uid, key_count = observation.split("<output>")[1].split()[:2]
    assert "rk-swe1-secret" not in observation and "no-store" in observation and "no-gateway" in observation
    assert "no-workdir" in observation and json.loads((workdir / "trajectory.json").read_text())
    assert "rk-swe1-secret" not in (workdir / "trajectory.json").read_text()  # litellm's model writes it there
    assert int(uid) >= 100_000 and key_count == "0", observation
    assert [m["role"] for m in model.requests[1]["messages"]] == ["system", "user", "assistant", "user"]


@pytest.mark.slow
def test_mini_swe_agent_through_the_gateway_is_recorded_and_graded(tiny_store, engine_url, tmp_path):
    store, instances = tiny_store
    recipe = SweRecipe(store=store, source="unused")
    # one_command's model over plain HTTP (litellm's, the default's, runs through the gateway in tests/e2e)
    task = rollout_input(instances[0], store) | {"model": TINY_SERVED_NAME, "step_limit": 3, "max_tokens": 48,
                                                 "harness_config": "one_command"}
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
    graded = "fail_to_pass_failed" in grade.details or grade.details.get("empty_patch") is True  # random commands
    assert graded and "patch_error" not in grade.details, grade.details
