"""The grader: gold resolves, empty does not, agent-edited tests are tampering, SWE-bench's skip rule (the attacks are
in test_grader_attacks.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from controller.recipe import GradeInput
from recipes.swe.diffs import apply_patch
from recipes.swe.grader import is_resolved
from recipes.swe.recipe import SweRecipe, rollout_input
from recipes.swe.testrun import TestRun

F2P, P2P = ["t.py::a"], ["t.py::b", "t.py::c"]


@pytest.mark.parametrize(("outcomes", "resolved"), [
    ({"t.py::a": "passed", "t.py::b": "passed", "t.py::c": "passed"}, True),
    ({"t.py::a": "passed", "t.py::b": "skipped", "t.py::c": "passed"}, True),  # skipped P2P is fine
    ({"t.py::a": "skipped", "t.py::b": "passed", "t.py::c": "passed"}, False),  # skipped F2P is a failure
    ({"t.py::a": "failed", "t.py::b": "passed", "t.py::c": "passed"}, False),
    ({"t.py::a": "passed", "t.py::b": "failed", "t.py::c": "passed"}, False),
    ({"t.py::a": "passed", "t.py::b": "passed"}, False),  # a P2P test that did not run
])
def test_resolved_follows_swe_bench_rule(outcomes, resolved):
    assert is_resolved(TestRun(outcomes=outcomes), F2P, P2P)[0] is resolved


def _attempt(store: Path, instance: dict, workdir: Path) -> tuple[SweRecipe, dict, Path]:
    recipe = SweRecipe(store=store, source="unused")
    task = rollout_input(instance, store)
    recipe.prepare_workdir(task, workdir)
    return recipe, task, workdir / "repo"


def _grade(recipe: SweRecipe, task: dict, workdir: Path):
    return recipe.grade(GradeInput(task=task, workdir=workdir, calls=[], exit_code=0))


def test_gold_fix_resolves_and_untouched_repo_does_not(tiny_store, tmp_path):
    store, instances = tiny_store
    instance = instances[0]
    recipe, task, repo = _attempt(store, instance, tmp_path / "untouched")
    assert not (repo / ".git").exists()
    empty = _grade(recipe, task, tmp_path / "untouched")
    assert empty.reward == 0.0 and empty.details["empty_patch"] is True, empty.details
    assert "pytest_returncode" not in empty.details  # nothing graded: the buggy checkout's tests are not run
    recipe, task, repo = _attempt(store, instance, tmp_path / "gold")
    apply_patch(repo, instance["patch"], reverse=True)
    gold = _grade(recipe, task, tmp_path / "gold")
    assert gold.reward == 1.0 and gold.details["resolved"] is True, gold.details


def test_a_diff_of_new_files_only_is_an_empty_patch_without_a_test_run(tiny_store, tmp_path):
    """New files the patch policy does not apply leave nothing to grade: reward 0, `empty_patch`, no pytest run (the
    buggy checkout fails by construction); the files are named as dropped."""
    store, instances = tiny_store
    recipe, task, repo = _attempt(store, instances[0], tmp_path / "new-files")
    (repo / "notes.txt").write_text("I fixed it\n")
    (repo / "helper_mod.py").write_text("VALUE = 1\n")
    grade = _grade(recipe, task, tmp_path / "new-files")
    assert grade.reward == 0.0 and grade.details["empty_patch"] is True and not grade.details["tamper"], grade.details
    assert sorted(grade.details["dropped_files"]) == ["helper_mod.py", "notes.txt"]
    assert "pytest_returncode" not in grade.details


def test_tests_the_agent_changed_are_tampering_even_with_the_fix(tiny_store, tmp_path):
    store, instances = tiny_store
    instance = instances[0]
    recipe, task, repo = _attempt(store, instance, tmp_path / "cheat")
    # The cheat: every test passes trivially, and a conftest skips whatever is left.
    (repo / "tests" / "test_tinymath.py").write_text("def test_clamp_inside():\n    pass\n")
    (repo / "conftest.py").write_text("import pytest\n\n@pytest.fixture(autouse=True)\ndef _skip():\n"
                                      "    pytest.skip('cheat')\n")
    apply_patch(repo, instance["patch"], reverse=True)  # the real fix, with the cheat still there
    cheat = _grade(recipe, task, tmp_path / "cheat")
    assert cheat.reward == 0.0 and cheat.details["tamper"] is True
    assert sorted(r.split(":")[0] for r in cheat.details["tamper_reasons"]) == ["conftest.py", "tests/test_tinymath.py"]


def test_a_reproduction_script_is_dropped_and_the_fix_still_resolves(tiny_store, tmp_path):
    store, instances = tiny_store
    instance = instances[0]
    recipe, task, repo = _attempt(store, instance, tmp_path / "fix")
    apply_patch(repo, instance["patch"], reverse=True)
    (repo / "reproduce.py").write_text("import tinymath\nprint(tinymath.clamp(5, 0, 10))\n")
    fixed = _grade(recipe, task, tmp_path / "fix")
    assert fixed.reward == 1.0 and fixed.details["tamper"] is False, fixed.details
    assert fixed.details["dropped_files"] == ["reproduce.py"] and fixed.details["graded_files"] == ["tinymath.py"]


def test_a_missing_repository_grades_zero_with_the_reason(tiny_store, tmp_path):
    store, instances = tiny_store
    grade = _grade(SweRecipe(store=store, source="unused"), rollout_input(instances[0], store), tmp_path)
    assert grade.reward == 0.0 and "missing" in grade.details["error"]


def test_a_fix_that_breaks_the_import_grades_zero_without_tamper(tiny_store, tmp_path):
    store, instances = tiny_store
    instance = instances[0]
    recipe, task, repo = _attempt(store, instance, tmp_path / "broken")
    apply_patch(repo, instance["patch"], reverse=True)
    with (repo / "tinymath.py").open("a") as handle:
        handle.write("\nraise ImportError('half-finished fix')\n")
    broken = _grade(recipe, task, tmp_path / "broken")
    assert broken.reward == 0.0 and broken.details["tamper"] is False and broken.details["pytest_returncode"] == 1
    assert broken.details["fail_to_pass_failed"] == instance["FAIL_TO_PASS"]
