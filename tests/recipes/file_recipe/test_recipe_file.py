"""A recipe from a file, without processes: every bad key and value named at once, the tasks and the harness command
as the controller gets them, the files copied, the verdict's format, the shaping shares."""

from __future__ import annotations

from pathlib import Path

import pytest

from recipes.file_recipe.grader_sandbox import (
    NON_DUMPABLE_LAUNCHER,
    GraderVerdictError,
    non_dumpable_argv,
    parse_verdict,
)
from recipes.file_recipe.recipe import AnswerPatternShares, load_recipe_file
from recipes.file_recipe.schema import RecipeFileError
from rollouts.recipe import final_text, recipe_hooks
from rollouts.registry import get_recipe
from tests.recipes.file_recipe.support import RECIPE, recipe_folder
from tests.trainer.loop_support import call, group


def test_every_bad_key_and_value_is_named(tmp_path: Path):
    bad = ("name: 'my agent'\ntasks: tasks.jsonl\nharnes: {command: [python, agent.py]}\n"
           "grader: {command: [], timeout_s: -1}\nshaping: {answer_pattern: '(('}\n")
    path = recipe_folder(tmp_path / "r", recipe=bad)
    with pytest.raises(RecipeFileError) as caught:
        load_recipe_file(path)
    text = str(caught.value)
    assert "has 6 problem(s)" in text
    for expected in ("name: String should match pattern", "found 'my agent'", "harnes: unknown key",
                     "harness: Field required", "grader.command: List should have at least 1 item",
                     "grader.timeout_s: Input should be greater than 0", "shaping.answer_pattern: Value error, not a "
                     "regular expression"):
        assert expected in text, (expected, text)


def test_missing_files_and_programs_are_named_before_a_run(tmp_path: Path):
    recipe = RECIPE.replace("[python, agent.py]", "[no-such-program-here, agent.py]").replace(
        "tasks.jsonl", "taks.jsonl") + "files: [notes.txt]\n"
    with pytest.raises(RecipeFileError, match="(?s)has 3 problem.*harness.command: 'no-such-program-here' is "
                                              "neither.*files.0: 'notes.txt' does not exist.*tasks: 'taks.jsonl' does "
                                              "not exist"):
        load_recipe_file(recipe_folder(tmp_path / "r", recipe=recipe))


def test_unreadable_files_are_named_with_the_fix(tmp_path: Path):
    path = recipe_folder(tmp_path / "r")
    (path.parent / "grade.py").chmod(0o600)
    with pytest.raises(RecipeFileError, match="grade.py is not readable by the sandbox's users .*chmod -R o\\+rX"):
        load_recipe_file(path)


def test_tasks_ids_harness_command_and_files(tmp_path: Path):
    path = recipe_folder(tmp_path / "r", recipe=RECIPE.replace("  command: [python, agent.py]\n",
                                                               "  command: [python, agent.py]\n  timeout_s: 90\n")
                         + "files: [notes.txt]\n")
    (path.parent / "notes.txt").write_text("hello")
    recipe = get_recipe(str(path))
    assert recipe.name == "sums" and get_recipe(str(path)) is recipe  # read once per process
    tasks = recipe.generate(4, seed=0)
    assert [t["id"] for t in tasks] == ["sums-0", "sums-1", "sums-2", "sums-3"] and tasks[1]["answer"] == 3
    assert {t["harness_timeout_s"] for t in tasks} == {90.0}
    with pytest.raises(ValueError, match="holds 10 tasks but the run asks for 11"):
        recipe.generate(11, seed=0)
    command = recipe.harness_command()
    assert command[1] == str(path.parent / "agent.py") and Path(command[0]).name.startswith("python")
    assert recipe.harness_readonly() == (path.parent / "agent.py",)  # never the folder (tasks, grader)
    assert recipe.harness_task(tasks[1]) == {"id": "sums-1", "question": "What is 1 + 2?", "harness_timeout_s": 90.0}
    workdir = tmp_path / "work"
    workdir.mkdir()
    recipe.prepare_workdir(tasks[0], workdir)
    assert (workdir / "notes.txt").read_text() == "hello"
    hooks = recipe_hooks(recipe)
    assert hooks.shaping_shares is None and "grader" in hooks.no_signal_hint


def test_the_settings_and_the_shaping_term_reach_the_run_config(tmp_path: Path):
    from flows.config import load_run_config

    recipe = RECIPE + ("shaping: {answer_pattern: '-?[0-9]+'}\nsettings:\n  data: {train_tasks: 8, val_tasks: 2}\n"
                       "  algorithm: {advantage: {format_reward: 0.5}}\n")
    path = recipe_folder(tmp_path / "r", recipe=recipe)
    config = load_run_config(None, {"data.val_tasks": 1}, str(path))
    assert config.recipe == str(path) and config.recipe_label() == "sums"
    assert (config.data.train_tasks, config.data.val_tasks, config.algorithm.advantage.format_reward) == (8, 1, 0.5)
    without = recipe_folder(tmp_path / "s", recipe=RECIPE)
    with pytest.raises(ValueError, match="defines no shaping term"):
        load_run_config(None, {"algorithm.advantage.format_reward": 0.5}, str(without))
    with pytest.raises(ValueError, match="recipe files run on the local runner"):
        load_run_config(None, {"controller.runner": "kubernetes"}, str(without))


def test_answer_pattern_shares_read_the_recorded_answers():
    answers = {"g-0": ["so 12"], "g-1": ["twelve", " 7 "], "g-2": []}
    groups = [group("g", [1.0, 0.0, 0.0], calls=lambda rid: tuple(call(rid, i, response_text=text)
                                                                 for i, text in enumerate(answers[rid])))]
    assert AnswerPatternShares("-?[0-9]+")(groups) == {"g-0": 1.0, "g-1": 0.5, "g-2": 0.0}


@pytest.mark.parametrize(("output", "reason"), [
    ("", "printed no verdict"),
    ("working...\n", "last line is not JSON"),
    ('{"reward": "1"}\n', "reward must be a finite number"),
    ('{"reward": NaN}\n', "reward must be a finite number"),
    ('{"reward": 1, "extra": 2}\n', "must be an object with keys reward and details"),
    ('{"reward": 1, "details": [1]}\n', "details must be an object"),
])
def test_a_malformed_verdict_is_named(output, reason):
    with pytest.raises(GraderVerdictError, match=reason):
        parse_verdict(output)


def test_the_verdict_is_the_last_line():
    assert parse_verdict('noise\n{"reward": 0.5, "details": {"ok": true}}\n\n') == (0.5, {"ok": True})


def test_the_verdict_line_is_split_at_newlines_only():
    # a grader echoing the answer with ensure_ascii=False: U+2028 and U+0085 inside a string stay in the one line
    output = '{"reward": 0.0, "details": {"answer": "6\u2028\u0085"}}\n'
    assert parse_verdict(output) == (0.0, {"answer": "6\u2028\u0085"})


def test_a_verdict_outside_the_reward_range_is_the_attempts_failure():
    assert parse_verdict('{"reward": -1}', (-1.0, 1.0)) == (-1.0, {})
    for reward in ("-1", "1.5"):
        with pytest.raises(GraderVerdictError, match=f"reward {reward} is outside the recipe's reward_range"):
            parse_verdict('{"reward": ' + reward + '}')


def test_the_failure_reward_is_the_bottom_of_the_reward_range(tmp_path: Path):
    assert load_recipe_file(recipe_folder(tmp_path / "a")).failure_reward == 0.0
    scaled = RECIPE.replace("  timeout_s: 30\n", "  timeout_s: 30\n  reward_range: [-1, 2]\n")
    assert load_recipe_file(recipe_folder(tmp_path / "b", recipe=scaled)).failure_reward == -1.0
    for bad in ("[1, 0]", "[0, .inf]", "[0]"):
        with pytest.raises(RecipeFileError, match="grader.reward_range"):
            load_recipe_file(recipe_folder(tmp_path / "c", recipe=RECIPE.replace(
                "  timeout_s: 30\n", f"  timeout_s: 30\n  reward_range: {bad}\n")))


@pytest.mark.parametrize(("extra", "key"), [
    ("  files: [.]\n", "harness.files.0"),
    ("  files: [tasks.jsonl]\n", "harness.files.0"),
    ("  files: [grade.py]\n", "harness.files.0"),
])
def test_a_harness_that_would_see_the_tasks_or_the_grader_is_refused(tmp_path: Path, extra, key):
    recipe = RECIPE.replace("  command: [python, agent.py]\n", "  command: [python, agent.py]\n" + extra)
    with pytest.raises(RecipeFileError, match=f"{key}: .* would show the harness .*(tasks.jsonl|grade.py)"):
        load_recipe_file(recipe_folder(tmp_path / "r", recipe=recipe))


def test_files_copied_to_the_workdir_or_the_command_must_not_be_the_grader(tmp_path: Path):
    with pytest.raises(RecipeFileError, match="files.0: .* would show the harness .*grade.py"):
        load_recipe_file(recipe_folder(tmp_path / "a", recipe=RECIPE + "files: [grade.py]\n"))
    linked = recipe_folder(tmp_path / "c", recipe=RECIPE + "files: [data]\n")
    (linked.parent / "data").mkdir(mode=0o755)
    (linked.parent / "data" / "rows.jsonl").symlink_to(linked.parent / "tasks.jsonl")  # copied as its target
    with pytest.raises(RecipeFileError, match="files.0: .* would show the harness .*tasks.jsonl"):
        load_recipe_file(linked)
    with pytest.raises(RecipeFileError, match="harness.command: .* would show the harness .*tasks.jsonl"):
        load_recipe_file(recipe_folder(tmp_path / "b", recipe=RECIPE.replace("[python, agent.py]",
                                                                           "[python, agent.py, tasks.jsonl]")))


def test_harness_files_are_bound_and_the_id_cannot_be_hidden(tmp_path: Path):
    path = recipe_folder(tmp_path / "r", recipe=RECIPE.replace("  command: [python, agent.py]\n",
                                                               "  command: [python, agent.py]\n  files: [lib]\n"))
    (path.parent / "lib").mkdir(mode=0o755)
    assert load_recipe_file(path).harness_readonly() == (path.parent / "agent.py", path.parent / "lib")
    with pytest.raises(RecipeFileError, match="hidden: Value error, \\['id'\\] cannot be hidden"):
        load_recipe_file(recipe_folder(tmp_path / "s", recipe=RECIPE.replace("hidden: [answer]", "hidden: [id]")))


def test_python_graders_run_non_dumpable_other_commands_as_they_are():
    python = "/venv/bin/python"
    assert non_dumpable_argv((python, "/r/grade.py", "x"), python) == [python, "-c", NON_DUMPABLE_LAUNCHER,
                                                                        "/r/grade.py", "x"]
    assert non_dumpable_argv((python, "-m", "grader"), python)[1:4] == ["-c", NON_DUMPABLE_LAUNCHER, "-m"]
    for command in ((python, "-c", "print(1)"), ("/bin/sh", "grade.sh"), (python, "-m")):
        assert non_dumpable_argv(command, python) == list(command)


def test_the_graded_answer_and_the_shaping_term_skip_side_calls_alike():
    calls = (call("g-0", 0, response_text="2 + 3 = 5"), call("g-0", 1, response_text="a title", side=True))
    assert final_text(calls) == "2 + 3 = 5"  # not the side call, recorded last
    groups = [group("g", [1.0], calls=lambda rid: calls)]
    assert AnswerPatternShares("=")(groups) == {"g-0": 1.0}
    assert final_text((call("g-0", 0, response_text="side", side=True),)) == ""
