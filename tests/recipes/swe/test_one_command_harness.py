"""The SWE harness in the `one_command` configuration (the `make train` profile's) on a level-0 task: a scripted
upstream answers with the statement's command in a ```bash block, mini-swe-agent runs it in the command sandbox, and
the grader's fresh checkout passes; the profile's task overrides are what the harness reads."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from controller.recipe import TASK_FILE, GradeInput
from flows.config import load_run_config
from recipes.swe.generator import generate
from recipes.swe.harness import DEFAULTS
from recipes.swe.harness_configs import WORKDIR_FILE, config_path, load_harness_config
from recipes.swe.ladder import LadderMix
from recipes.swe.recipe import SweRecipe, rollout_input
from recipes.swe.sandbox import isolation_problem
from rollouts.feed import FeedConfig, RolloutFeed
from tests.recipes.swe.completion_server import CompletionServer


def statement_command(statement: str) -> str:
    """The one command a level-0 statement gives (its last fenced block)."""
    return statement.split("This command fixes it:\n\n```bash\n")[1].split("\n```")[0]


class RecordingClient:
    """The gateway's side of the rollout feed: keeps the rollouts it is asked to create."""

    def __init__(self) -> None:
        self.specs: list = []

    def create_rollouts(self, specs: list) -> list:
        self.specs.extend(specs)
        return specs


def profile_task(task: dict) -> dict:
    """`task` as the `make train` profile's rollout feed hands it to the gateway (its task_overrides merged in)."""
    config = load_run_config("swe-local", recipe="swe")
    client = RecordingClient()
    feed = RolloutFeed(client, FeedConfig(1, "g", task_overrides=config.rollout.task_overrides), iter([(0, task)]))
    assert feed.submit(1, policy_version=0) == 1
    return client.specs[0].input


def test_the_profile_runs_the_one_command_config_with_one_call():
    task = DEFAULTS | profile_task({"id": "x", "problem_statement": "p", "store": "/s", "level": 0})
    assert task["harness_config"] == "one_command" and task["step_limit"] == 1
    assert load_harness_config(task["harness_config"])["model"]["action_regex"].startswith("```(?:bash")


@pytest.mark.slow  # a real mini-swe-agent start (its HTTP model, no litellm) and a graded pytest run: about 4 s
@pytest.mark.skipif(isolation_problem() is not None, reason=f"no namespaces here: {isolation_problem()}")
def test_a_bash_fenced_answer_fixes_a_level0_task(tiny_project, tmp_path):
    store = tmp_path / "store"
    instance = generate(str(tiny_project), store, count=1, seed=0, mix=LadderMix(levels={0: 1.0}))[0]
    recipe = SweRecipe(store=store, source="unused")
    task = profile_task(rollout_input(instance, store))
    workdir = tmp_path / "work"
    workdir.mkdir()
    (workdir / TASK_FILE).write_text(json.dumps(task))
    recipe.prepare_workdir(task, workdir)  # the runner's sandbox binds only Python files: the config is copied
    assert (workdir / WORKDIR_FILE).read_text() == config_path("one_command").read_text()
    command = statement_command(instance["problem_statement"])
    model = CompletionServer(lambda _n: f"```bash\n{command}\n```")
    env = {**os.environ, "OPENAI_BASE_URL": f"{model.url}/v1", "OPENAI_API_KEY": "rk-test",
           "HARNESSRL_TASK": str(workdir / TASK_FILE)}
    harness = subprocess.run([sys.executable, "-m", "recipes.swe.harness"], cwd=workdir, env=env, capture_output=True,
                             text=True, timeout=120)
    model.close()
    assert harness.returncode == 0, harness.stderr[-3000:]
    assert json.loads(harness.stdout.strip().splitlines()[-1])["exit_status"] == "LimitsExceeded"  # its one call
    messages = model.requests[0]["messages"]
    assert len(model.requests) == 1 and [m["role"] for m in messages] == ["system", "user"]
    assert messages[0]["content"].strip() == load_harness_config("one_command")["agent"]["system_template"].strip()
    assert messages[1]["content"].strip() == (f"{instance['problem_statement'].strip()}\n\n"
                                              "Reply with only that command, in a ```bash code block.")
    grade = recipe.grade(GradeInput(task=task, workdir=workdir, calls=[], exit_code=0))
    assert grade.reward == 1.0 and grade.details["resolved"] is True
