"""The grader: gold resolves, empty does not, agent-edited tests are restored, SWE-bench's skip rule."""

from __future__ import annotations

from pathlib import Path

import pytest

from agents.swe.diffs import apply_patch
from agents.swe.grader import filter_patch, is_resolved
from agents.swe.recipe import SweRecipe, rollout_input
from agents.swe.testrun import TestRun
from controller.recipe import GradeInput

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


def test_filter_patch_drops_tests_conftest_and_config():
    patch = "".join(f"diff --git a/{p} b/{p}\n--- a/{p}\n+++ b/{p}\n@@ -1 +1 @@\n-x\n+y\n"
                    for p in ["pkg/mod.py", "tests/test_mod.py", "conftest.py", "pkg/conftest.py", "setup.cfg"])
    filtered = filter_patch(patch)
    assert filtered.restored == ("tests/test_mod.py", "conftest.py", "pkg/conftest.py", "setup.cfg")
    assert "pkg/mod.py" in filtered.graded and "conftest" not in filtered.graded


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
    assert empty.reward == 0.0 and empty.details["fail_to_pass_failed"] == instance["FAIL_TO_PASS"]
    recipe, task, repo = _attempt(store, instance, tmp_path / "gold")
    apply_patch(repo, instance["patch"], reverse=True)
    gold = _grade(recipe, task, tmp_path / "gold")
    assert gold.reward == 1.0 and gold.details["resolved"] is True, gold.details


def test_tests_the_agent_changed_are_restored_before_grading(tiny_store, tmp_path):
    store, instances = tiny_store
    instance = instances[0]
    recipe, task, repo = _attempt(store, instance, tmp_path / "cheat")
    # The cheat: every test passes trivially, and a conftest skips whatever is left.
    (repo / "tests" / "test_tinymath.py").write_text("def test_clamp_inside():\n    pass\n")
    (repo / "conftest.py").write_text("import pytest\n\n@pytest.fixture(autouse=True)\ndef _skip():\n"
                                      "    pytest.skip('cheat')\n")
    cheat = _grade(recipe, task, tmp_path / "cheat")
    assert cheat.reward == 0.0
    assert sorted(cheat.details["restored_files"]) == ["conftest.py", "tests/test_tinymath.py"]
    apply_patch(repo, instance["patch"], reverse=True)  # the real fix, with the cheat still there
    fixed = _grade(recipe, task, tmp_path / "cheat")
    assert fixed.reward == 1.0, fixed.details


def test_a_missing_repository_grades_zero_with_the_reason(tiny_store, tmp_path):
    store, instances = tiny_store
    grade = _grade(SweRecipe(store=store, source="unused"), rollout_input(instances[0], store), tmp_path)
    assert grade.reward == 0.0 and "missing" in grade.details["error"]
