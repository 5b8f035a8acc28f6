"""The calculator harness end to end: the real program (the anthropic SDK's tool runner) as a subprocess under the
harness contract, through the in-process gateway's Messages translation, in front of a scripted model; the recipe's
grader on the recorded calls."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from controller.recipe import TASK_FILE, Grade, GradeInput
from controller.recipes import get_recipe
from gateway.client import GatewayClient
from gateway.records import CallRecord, CallStatus, RolloutSpec
from recipes.calculator.tasks import make_task
from tests.gateway.support import ADMIN_TOKEN
from tests.inprocess import InProcessGateway
from tests.recipes.calculator.scripted_model import ScriptedModel, last_tool_result, solver, tool_call

pytestmark = pytest.mark.slow  # each test runs the harness as a process

HARNESS_TIMEOUT_S = 60
FORCED_CHAT_CHOICE = {"type": "function", "function": {"name": "calculator"}}


@pytest.fixture(scope="module")
def model():
    scripted = ScriptedModel(solver).start()
    yield scripted
    scripted.stop()


@pytest.fixture(scope="module")
def admin(tmp_path_factory, model):
    gateway = InProcessGateway(tmp_path_factory.mktemp("gw-calculator") / "store.db").start()
    with GatewayClient(gateway.url, ADMIN_TOKEN) as client:
        client.register_model("policy", model.base_url)
        yield client
    gateway.stop()


def run(admin: GatewayClient, model: ScriptedModel, task: dict, workdir: Path,
        ) -> tuple[subprocess.CompletedProcess, list[CallRecord], Grade]:
    """What the controller does: task file, harness under the contract only, recorded calls, the grade."""
    recipe = get_recipe("calculator")
    model.requests.clear()
    created = admin.create_rollouts([RolloutSpec(id=task["id"], group_id="calculator")])[0]
    (workdir / TASK_FILE).write_text(json.dumps(task))
    recipe.prepare_workdir(task, workdir)
    env = {key: value for key, value in os.environ.items() if not key.startswith(("OPENAI_", "ANTHROPIC_"))}
    env |= {"OPENAI_BASE_URL": created.base_url, "OPENAI_API_KEY": created.api_key,
            "HARNESSRL_TASK": str(workdir / TASK_FILE)}
    done = subprocess.run(recipe.harness_command(), cwd=workdir, env=env, capture_output=True, text=True,
                          timeout=HARNESS_TIMEOUT_S)
    calls = admin.calls(task["id"])
    return done, calls, recipe.grade(GradeInput(task=task, workdir=workdir, calls=calls, exit_code=done.returncode))


def test_a_model_that_calls_the_calculator_and_states_its_result_gets_reward_1(admin, model, tmp_path):
    model.policy = solver
    task = make_task("calc-solver", 317, 46, "product")
    done, calls, grade = run(admin, model, task, tmp_path)
    assert done.returncode == 0, done.stderr
    assert grade.reward == 1.0 and grade.details["stated"] == "14582" and grade.details["tool_calls"] == 1
    assert done.stdout.strip() == "The answer is 14582."
    assert [c.kind for c in calls] == ["messages", "messages"] and all(c.status == CallStatus.OK for c in calls)
    assert [c.finish_reason for c in calls] == ["tool_calls", "stop"]
    assert calls[0].request["tool_choice"] == {"type": "tool", "name": "calculator"}  # forced on the first turn
    assert calls[1].request["tool_choice"] == {"type": "auto"}  # then the model's choice
    assert [r.get("tool_choice") for r in model.requests] == [FORCED_CHAT_CHOICE, "auto"]  # carried to the engine
    assert model.requests[0]["messages"][0]["role"] == "system"
    assert "<tool_call>" in model.requests[0]["messages"][0]["content"]  # the worked example
    assert last_tool_result(model.requests[1]) == "14582"  # computed inside the harness
    assert all(c.prompt_token_ids and c.response_token_ids for c in calls)


def test_without_forcing_the_first_turn_leaves_the_choice_to_the_model(admin, model, tmp_path):
    model.policy = lambda body: {"content": "It is about 14000."}
    task = {**make_task("calc-guess", 317, 46, "product"), "force_tool": False}
    done, calls, grade = run(admin, model, task, tmp_path)
    assert done.returncode == 0, done.stderr
    assert [r.get("tool_choice") for r in model.requests] == ["auto"]
    assert grade.reward == 0.0 and grade.details["stated"] == "14000" and grade.details["tool_calls"] == 0
    assert len(calls) == 1


def test_a_hostile_expression_is_refused_by_the_tool_and_nothing_runs(admin, model, tmp_path):
    marker = tmp_path / "pwned"
    hostile = f"__import__('os').system('touch {marker}')"

    def attacker(body: dict) -> dict:
        result = last_tool_result(body)
        return tool_call(hostile) if result is None else {"content": f"The tool said: {result}"}

    model.policy = attacker
    done, calls, grade = run(admin, model, make_task("calc-hostile", 120, 34, "sum"), tmp_path)
    assert done.returncode == 0, done.stderr
    assert not marker.exists()
    result = last_tool_result(model.requests[1])
    assert result is not None and "not arithmetic" in result and "Error" in result
    assert grade.reward == 0.0 and len(calls) == 2


def test_the_harness_claims_nothing_the_grader_believes(admin, model, tmp_path):
    """A final text whose last number is not the result scores 0, whatever the tool computed and the harness
    printed; a right answer with commas or a decimal point scores 1."""
    def copies_the_expression(body: dict) -> dict:
        result = last_tool_result(body)
        return tool_call("120 + 34") if result is None else {"content": f"So {result} is 120 + 34"}

    model.policy = copies_the_expression
    done, calls, grade = run(admin, model, make_task("calc-last-number", 120, 34, "sum"), tmp_path)
    assert done.returncode == 0 and "154" in done.stdout
    assert grade.reward == 0.0 and grade.details["stated"] == "34"

    model.policy = lambda body: (tool_call("999 * 99") if last_tool_result(body) is None
                                 else {"content": "The answer is 98,901.0"})
    _, _, grade = run(admin, model, make_task("calc-commas", 999, 99, "product"), tmp_path)
    assert grade.reward == 1.0


def test_a_model_that_keeps_calling_the_tool_stops_at_max_turns(admin, model, tmp_path):
    model.policy = lambda body: tool_call("1 + 1")
    task = {**make_task("calc-loop", 500, 50, "sum"), "max_turns": 3}
    done, calls, grade = run(admin, model, task, tmp_path)
    assert done.returncode == 0, done.stderr
    assert len(calls) == 3 and grade.reward == 0.0 and grade.details["tool_calls"] == 3
    assert grade.details["reason"] == "the final text states no number"
