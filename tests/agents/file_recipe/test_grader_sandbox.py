"""A recipe file's grader in its own sandbox (real bubblewrap): the verdict, read-only working directory and task,
nothing else of the host, no network, a crash or a timeout named as the attempt's failure."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agents.file_recipe.grader_sandbox import GraderVerdictError
from agents.file_recipe.recipe import load_recipe_file
from rollouts.recipe import GradeInput
from tests.agents.file_recipe.support import RECIPE, recipe_folder
from tests.trainer.loop_support import call

pytestmark = pytest.mark.slow

PROBE = '''import json, os, socket
workdir = os.environ["HARNESSRL_WORKDIR"]
def attempt(action):
    try:
        action()
        return "allowed"
    except OSError as error:
        return type(error).__name__
seen = {
    "agent_file": open(os.path.join(workdir, "answer.txt")).read(),
    "write_workdir": attempt(lambda: open(os.path.join(workdir, "x"), "w")),
    "project_tree": os.path.exists("PROJECT"),
    "network": attempt(lambda: socket.create_connection(("1.1.1.1", 53), timeout=2)),
    "task_id": json.load(open(os.environ["HARNESSRL_TASK"]))["id"],
    "uid": os.getuid(),
}
print("noise first")
print(json.dumps({"reward": 0.25, "details": seen}))
'''


def graded(tmp_path: Path, task: dict, answer: str) -> GradeInput:
    workdir = tmp_path / "work"
    workdir.mkdir(mode=0o755, parents=True)
    (workdir / "answer.txt").write_text("from the agent")
    return GradeInput(task=task, workdir=workdir, calls=[call("r1", 0, response_text=answer)], exit_code=0)


def test_the_grader_scores_the_recorded_answer(tmp_path: Path):
    recipe = load_recipe_file(recipe_folder(tmp_path / "r"))
    task = recipe.generate(3, 0)[2]  # "What is 2 + 3?"
    assert recipe.grade(graded(tmp_path, task, "5")).reward == 1.0
    grade = recipe.grade(graded(tmp_path / "b", task, "six"))
    assert grade.reward == 0.0 and grade.details == {"answer": "six", "exit_code": 0}


def test_the_grader_sees_only_its_inputs_read_only_and_no_network(tmp_path: Path):
    project = Path(__file__).resolve().parents[3] / "pyproject.toml"
    recipe = load_recipe_file(recipe_folder(tmp_path / "r", grader=PROBE.replace("PROJECT", str(project))))
    grade = recipe.grade(graded(tmp_path, {"id": "t-1"}, "5"))
    seen = grade.details
    assert grade.reward == 0.25 and seen["agent_file"] == "from the agent" and seen["task_id"] == "t-1"
    assert seen["write_workdir"] != "allowed" and seen["network"] != "allowed" and seen["project_tree"] is False
    assert seen["uid"] != 0


@pytest.mark.parametrize(("grader", "reason"), [
    ("raise SystemExit(3)\n", "exited with status 3"),
    ("import time\ntime.sleep(30)\n", "took longer than 2 s"),
    ("print('no verdict here')\n", "last line is not JSON"),
])
def test_a_grader_without_a_verdict_is_the_attempts_failure_with_the_reason(tmp_path: Path, grader, reason):
    recipe = load_recipe_file(recipe_folder(tmp_path / "r", grader=grader,
                                            recipe=RECIPE.replace("timeout_s: 30", "timeout_s: 2")))
    with pytest.raises(GraderVerdictError, match=reason):
        recipe.grade(graded(tmp_path, {"id": "t"}, "5"))


def test_the_task_file_is_the_rollouts_input_not_the_working_directorys(tmp_path: Path):
    grader = ('import json, os\nprint(json.dumps({"reward": 1, "details": '
              'json.load(open(os.environ["HARNESSRL_TASK"]))}))\n')
    recipe = load_recipe_file(recipe_folder(tmp_path / "r", grader=grader))
    attempt = graded(tmp_path, {"id": "t", "answer": 5}, "5")
    (attempt.workdir / "task.json").write_text(json.dumps({"id": "t", "answer": 999}))  # the harness's rewrite
    assert recipe.grade(attempt).details["answer"] == 5
