"""What a recipe file's harness can read in the real sandbox (local runner): its task without the hidden fields, its
own files, never the task rows or the grader (the review's F1: the answer from task.json, tasks.jsonl, grade.py)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from controller.attempt import prepare_attempt
from controller.config import ControllerConfig
from controller.runners.local import LocalRunner
from gateway.records import ClaimedRollout, RolloutMode, RolloutState
from recipes.file_recipe.recipe import load_recipe_file
from tests.recipes.file_recipe.support import recipe_folder

pytestmark = pytest.mark.slow  # a harness process in the sandbox

PROBE = '''import json, os
def read(path):
    try:
        return open(path).read()
    except OSError as error:
        return type(error).__name__
task = json.load(open(os.environ["HARNESSRL_TASK"]))
print(json.dumps({"task": task, "tasks.jsonl": read("FOLDER/tasks.jsonl"), "grade.py": read("FOLDER/grade.py"),
                  "agent.py": read("FOLDER/agent.py")[:20], "folder": read("FOLDER/my_recipe.yaml")}))
'''


def test_the_harness_reads_its_task_without_the_answer_and_not_the_tasks_or_the_grader(tmp_path: Path):
    path = recipe_folder(tmp_path / "my-agent")
    recipe = load_recipe_file(path)
    (path.parent / "agent.py").write_text(PROBE.replace("FOLDER", str(path.parent)))
    task = recipe.generate(3, 0)[2]
    assert task["answer"] == 5
    config = ControllerConfig(work_dir=tmp_path / "work", logs_dir=tmp_path / "logs", harness_timeout_s=60)
    rollout = ClaimedRollout(id="r1", group_id="g", input=task, mode=RolloutMode.TRAIN, state=RolloutState.RUNNING,
                             attempt=1, max_attempts=1, created_at=time.time(), base_url="http://127.0.0.1:9/r/r1/v1",
                             api_key="k")
    attempt = prepare_attempt(config, rollout, recipe)
    assert "answer" not in json.loads((attempt.spec.workdir / "task.json").read_text())
    assert "answer" not in attempt.spec.task and attempt.rollout.input["answer"] == 5  # the grader's whole task
    runner = LocalRunner(1, kill_grace_s=0.5)
    runner.start(attempt.spec)
    deadline = time.monotonic() + 60
    while not (done := runner.poll()) and time.monotonic() < deadline:
        time.sleep(0.2)
    runner.close()
    assert done and done[0].exit_code == 0, attempt.spec.stderr_path.read_text()[-2000:]
    seen = json.loads(attempt.spec.stdout_path.read_text().strip().splitlines()[-1])
    assert seen["task"] == {"id": "sums-2", "question": "What is 2 + 3?"}
    assert seen["agent.py"].startswith("import json")  # its own code is there
    for secret in ("tasks.jsonl", "grade.py", "folder"):
        assert seen[secret] == "FileNotFoundError", (secret, seen[secret][:200])
