"""A recipe file's grader in its own sandbox (real bubblewrap): the verdict, read-only working directory and task,
nothing else of the host, no network, a crash or a timeout named as the attempt's failure."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from recipes.file_recipe.grader_sandbox import GraderVerdictError
from recipes.file_recipe.recipe import load_recipe_file
from rollouts.recipe import GradeInput
from tests.recipes.file_recipe.support import RECIPE, recipe_folder
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


# The agent's program, run by the grader: it tries every way to the task's answer and to the grader's memory.
SNOOP = r'''import glob, json, os
found = []
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        cmdline = open(f"/proc/{pid}/cmdline", "rb").read()
    except OSError:
        continue
    if b"grade.py" not in cmdline and b"agent_run.py" not in cmdline:
        continue  # only the grader and the agent-run tool
    for what in ("environ", "mem", "root/tmp", "cwd/."):
        try:
            path = f"/proc/{pid}/{what}"
            os.listdir(path) if what[-2:] in ("mp", "/.") else open(path, "rb").read(1)
            found.append(f"{what} of {cmdline[:60]!r}")
        except OSError:
            pass
for path in glob.glob("/tmp/harnessrl-file-grader-*/*/task.json"):
    found.append(path)
try:
    open(os.path.join(os.environ["HARNESSRL_WORKDIR"], "x"), "w")
    found.append("wrote the working directory")
except OSError:
    pass
print(json.dumps(found))
print('{"reward": 1.0}')
'''
# A careful grader: the agent's program only through harnessrl-agent-run; the verdict from its captured output.
AGENT_RUN_GRADER = r'''import json, os, subprocess, sys
wd = os.environ["HARNESSRL_WORKDIR"]
task = json.load(open(os.environ["HARNESSRL_TASK"]))
done = subprocess.run(["harnessrl-agent-run", "--timeout-s", "30", "--output", "out.txt", "--",
                       sys.executable, os.path.join(wd, "solution.py")])
out = open("out.txt").read()
print(json.dumps({"reward": float(out.strip() == str(task["answer"])),
                  "details": {"status": done.returncode, "found": json.loads(out.split("\n")[0] or "null")}}))
'''


def test_the_agents_program_run_through_harnessrl_agent_run_reaches_nothing_of_the_grader(tmp_path: Path):
    recipe = load_recipe_file(recipe_folder(tmp_path / "r", grader=AGENT_RUN_GRADER))
    attempt = graded(tmp_path, {"id": "t", "answer": 5}, "5")
    (attempt.workdir / "solution.py").write_text(SNOOP)
    grade = recipe.grade(attempt)
    assert grade.details["status"] == 0 and grade.details["found"] == [], grade.details
    assert grade.reward == 0.0  # its forged verdict line went to out.txt, not to the grader's output


def test_harnessrl_agent_run_names_a_timeout(tmp_path: Path):
    grader = ('import json, subprocess, sys\nrun = subprocess.run(["harnessrl-agent-run", "--timeout-s", "1", "--", '
              'sys.executable, "-c", "import time; print(1, flush=True); time.sleep(20)"], capture_output=True, '
              'text=True)\nprint(json.dumps({"reward": 0, "details": {"status": run.returncode, '
              '"out": run.stdout}}))\n')
    recipe = load_recipe_file(recipe_folder(tmp_path / "r", grader=grader))
    details = recipe.grade(graded(tmp_path, {"id": "t"}, "")).details
    assert details["status"] == 124 and details["out"].strip() == "1"


# The attacks of the review (F2), each against a grader that runs the agent's program itself, which the README tells
# graders not to do: even so, neither reaches the verdict.
MEMORY_GRADER = r'''import json, os, subprocess, sys
wd = os.environ["HARNESSRL_WORKDIR"]
r = subprocess.run([sys.executable, os.path.join(wd, "solution.py")], capture_output=True, text=True, timeout=10)
ok = r.stdout.strip() == "the sum is 1234567"
print(json.dumps({"reward": float(ok), "details": {"stdout": r.stdout[:60], "stderr": r.stderr[-200:]}}))
'''
MEMORY_PATCH = r'''import os, re
pid = os.getppid()
want, mine = b"the sum is 1234567\x00", b"the sum is 0000000\x00"
with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/mem", "r+b", buffering=0) as mem:
    for line in maps:
        addr, perms = line.split()[:2]
        if not perms.startswith("rw"):
            continue
        lo, hi = (int(x, 16) for x in addr.split("-"))
        try:
            mem.seek(lo); data = mem.read(hi - lo)
        except OSError:
            continue
        for m in re.finditer(re.escape(want), data):
            mem.seek(lo + m.start()); mem.write(mine)
print("the sum is 0000000")
'''
TASK_GRADER = r'''import json, os, subprocess, sys
out = subprocess.run([sys.executable, os.path.join(os.environ["HARNESSRL_WORKDIR"], "solution.py")],
                     capture_output=True, text=True, timeout=10)
task = json.load(open(os.environ["HARNESSRL_TASK"]))
print(json.dumps({"reward": float(out.stdout.strip() == str(task["answer"])), "details": {"err": out.stderr[-200:]}}))
'''
TASK_REWRITE = r'''import json, os
path = os.environ["HARNESSRL_TASK"]
task = json.load(open(path)); task["answer"] = "pwned"
open(path, "w").write(json.dumps(task))
print("pwned")
'''


@pytest.mark.parametrize(("grader", "solution", "error"), [(MEMORY_GRADER, MEMORY_PATCH, "PermissionError"),
                                                         (TASK_GRADER, TASK_REWRITE, "Error")])
def test_the_agents_program_cannot_rewrite_the_graders_memory_or_task(tmp_path: Path, grader, solution, error):
    recipe = load_recipe_file(recipe_folder(tmp_path / "r", grader=grader))
    attempt = graded(tmp_path, {"id": "t", "answer": 5}, "5")
    (attempt.workdir / "solution.py").write_text(solution)
    grade = recipe.grade(attempt)
    assert grade.reward == 0.0 and error in json.dumps(grade.details), grade.details
