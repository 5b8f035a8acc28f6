"""The generator: SWE-smith-schema instances whose bug breaks tests; on a real sdist from the package index (slow)."""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

import pytest

from recipes.swe.diffs import apply_patch, copy_tree
from recipes.swe.generator import STORED_FIELDS, base_path, find_instance, generate, load_instances
from recipes.swe.grader import grade_patch
from recipes.swe.instances import reverse_patch
from recipes.swe.recipe import SweRecipe
from recipes.swe.testrun import run_tests


def assert_valid_instance(instance: dict, store: Path) -> None:
    assert tuple(instance) == STORED_FIELDS
    assert instance["FAIL_TO_PASS"] and not set(instance["FAIL_TO_PASS"]) & set(instance["PASS_TO_PASS"])
    assert all("::" in test for test in instance["FAIL_TO_PASS"] + instance["PASS_TO_PASS"])
    assert instance["patch"].startswith("diff --git a/") and "\n@@ " in instance["patch"]
    assert instance["patch"] not in instance["problem_statement"]
    assert instance["FAIL_TO_PASS"][0] in instance["problem_statement"]
    base = base_path(store, instance)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=base, capture_output=True, text=True, check=True)
    assert head.stdout.strip() == instance["base_commit"]
    assert instance["instance_id"].startswith(instance["repo"].split("/", 1)[1] + ".")


def test_tiny_project_instances_follow_the_swe_smith_schema(tiny_store):
    store, instances = tiny_store
    assert len(instances) == 3
    assert len({i["instance_id"] for i in instances}) == 3
    for instance in instances:
        assert_valid_instance(instance, store)
    assert load_instances(store) == instances
    assert find_instance(store, instances[1]["instance_id"]) == instances[1]


def test_the_bug_patch_applies_to_the_base_and_breaks_exactly_fail_to_pass(tiny_store, tmp_path):
    store, instances = tiny_store
    instance = instances[0]
    repo = tmp_path / "repo"
    copy_tree(base_path(store, instance), repo)
    apply_patch(repo, instance["patch"])
    assert (repo / "tinymath.py").read_text() != (base_path(store, instance) / "tinymath.py").read_text()
    outcomes = run_tests(repo, instance["FAIL_TO_PASS"] + instance["PASS_TO_PASS"], rounds=1).outcomes
    assert sorted(n for n, o in outcomes.items() if o != "passed") == sorted(instance["FAIL_TO_PASS"])
    assert grade_patch(store, instance, "").details["empty_patch"] is True  # the buggy checkout: nothing to run


def test_same_seed_same_tasks_which_carry_no_patch_and_no_test_lists(tiny_store, tiny_project, tmp_path):
    store, instances = tiny_store
    tasks = SweRecipe(store=tmp_path / "store", source=str(tiny_project)).generate(2, seed=0)
    assert [t["id"] for t in tasks] == [i["instance_id"] for i in instances[:2]]
    assert all(set(t) == {"id", "problem_statement", "store", "level", "family"} for t in tasks)
    assert {t["level"] for t in tasks} == {3}  # no mix: the original statements
    with pytest.raises(KeyError, match="nope"):
        find_instance(store, "nope")


@pytest.mark.e2e  # a real package from the index, generated and graded: about a minute
def test_real_sdist_yields_three_valid_tasks_whose_gold_fix_resolves():
    with tempfile.TemporaryDirectory(prefix="harnessrl-swe-sdist-") as scratch:
        store = Path(scratch)
        instances = generate("pypi:xmltodict", store, count=3, seed=0)
        assert len(instances) == 3
        for instance in instances:
            assert_valid_instance(instance, store)
            gold = grade_patch(store, instance, reverse_patch(instance["patch"]))
            assert gold.reward == 1.0, gold.details



def test_one_bug_at_two_ladder_levels_is_one_family():
    from recipes.swe.generator import bug_id

    assert bug_id({"instance_id": "pypi__x.1.off_by_one__ab12cd34__l0", "level": 0}) == "pypi__x.1.off_by_one__ab12cd34"
    assert bug_id({"instance_id": "pypi__x.1.off_by_one__ab12cd34"}) == "pypi__x.1.off_by_one__ab12cd34"
    assert bug_id({"instance_id": "pypi__x.1.off_by_one__ab12cd34", "level": 3}) == "pypi__x.1.off_by_one__ab12cd34"
