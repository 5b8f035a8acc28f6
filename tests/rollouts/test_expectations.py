"""The per-recipe great-expectations suites: good data passes, each kind of bad row is named with its rule."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from controller.recipes import get_recipe, recipe_names
from recipes.swe.recipe import rollout_input
from recipes.swe_bench.recipe import rollout_input as bench_rollout_input
from rollouts.expectations import (
    SHOWN_IDS,
    DataValidationError,
    common_rules,
    recipe_rules,
    require_valid,
    required_field,
    validate_rows,
)
from tests.recipes.support import assert_caught, duplicate_value
from tests.recipes.support import drop_everywhere as _drop_everywhere
from tests.recipes.support import set_value as _set


def if_rows(count: int = 6) -> list[dict]:
    return get_recipe("instruction_following").generate(count, 0)


def search_rows(count: int = 6) -> list[dict]:
    return get_recipe("search").generate(count, 0)


def swe_rows(count: int = 3) -> list[dict]:
    instances = [{"instance_id": f"local__tinymath.0000.bug__{i}", "problem_statement": f"test {i} fails"}
                 for i in range(count)]
    return [rollout_input(instance, Path("/tmp/store")) for instance in instances]


def swe_bench_rows(count: int = 3) -> list[dict]:
    instances = [{"instance_id": f"astropy__astropy-{i}", "problem_statement": f"separability {i} is wrong",
                  "source": "swe-bench-verified", "base_commit": None if i == 0 else f"{i:040x}"}
                 for i in range(count)]
    return [bench_rollout_input(instance, Path("/tmp/store")) for instance in instances]


@pytest.mark.parametrize(("recipe", "rows"), [("instruction_following", if_rows(50)), ("search", search_rows(50)),
                                              ("swe", swe_rows()), ("swe_bench", swe_bench_rows())])
def test_generated_tasks_pass_their_recipe_suite(recipe, rows):
    report = validate_rows([{**row, "recipe": recipe} for row in rows], recipe)
    assert report.success, report.to_markdown()
    assert report.n_rows == len(rows)
    assert {"id_unique", "id_not_null"} <= {r.name for r in report.expectations}
    assert require_valid(report) is report


# (recipe, how the rows are broken, rule that must fail, row id it must name, words of the rule)
BAD_ROWS = [
    ("instruction_following", _drop_everywhere("prompt"), "prompt_exists", "if-0-00000", "column prompt is present"),
    ("instruction_following", duplicate_value(4, "id", 2), "id_unique", "if-0-00002", "id is unique"),
    ("instruction_following", _set(3, "prompt", "   "), "prompt_non_empty", "if-0-00003",
     "prompt is a non-empty string"),
    ("instruction_following", _set(1, "prompt", None), "prompt_not_null", "if-0-00001", "prompt is set in every row"),
    ("instruction_following", _set(5, "instructions", []), "instructions_non_empty", "if-0-00005",
     "instructions is a non-empty list"),
    ("instruction_following", _set(0, "instructions", [{"kind": "no:such", "params": {}}]), "instructions_known",
     "if-0-00000", "every instruction is {kind, params} with a known kind"),
    ("instruction_following", _set(2, "max_tokens", 0), "max_tokens_range", "if-0-00002", "max_tokens is >= 1"),
    ("instruction_following", _set(2, "step_limit", 0), "step_limit_range", "if-0-00002", "step_limit is >= 1"),
    ("instruction_following", _set(3, "id", None), "id_not_null", "row 3", "id is set in every row"),
    ("instruction_following", _set(1, "recipe", "search"), "recipe_matches", "if-0-00001",
     "recipe is 'instruction_following'"),
    ("search", _set(1, "hops", 3), "hops_range", "search-0-00001", "hops is >= 1 and <= 2"),
    ("search", _set(4, "max_turns", 0), "max_turns_range", "search-0-00004", "max_turns is >= 1"),
    ("search", _set(2, "corpus_seed", "7"), "corpus_seed_integer", "search-0-00002", "corpus_seed is an integer"),
    ("search", _set(0, "answers", ["Paris", ""]), "answers_are_text", "search-0-00000",
     "every answer is a non-empty string"),
    ("search", _set(5, "question", ""), "question_non_empty", "search-0-00005", "question is a non-empty string"),
    ("swe", _set(1, "FAIL_TO_PASS", []), "FAIL_TO_PASS_non_empty", "local__tinymath.0000.bug__1",
     "FAIL_TO_PASS is a non-empty list"),
    ("swe", _drop_everywhere("store"), "store_exists", "local__tinymath.0000.bug__0", "column store is present"),
    ("swe_bench", _set(1, "image", ""), "image_non_empty", "astropy__astropy-1", "image is a non-empty string"),
    ("swe_bench", _set(2, "base_commit", " "), "base_commit_non_empty", "astropy__astropy-2",
     "base_commit is a non-empty string"),
]


@pytest.mark.parametrize(("recipe", "mutate", "rule", "row_id", "words"), BAD_ROWS,
                         ids=[f"{case[0]}-{case[2]}" for case in BAD_ROWS])
def test_each_kind_of_bad_row_is_caught_naming_the_row_and_the_rule(recipe, mutate, rule, row_id, words):
    rows = {"instruction_following": if_rows, "search": search_rows, "swe": swe_rows,
            "swe_bench": swe_bench_rows}[recipe]()
    mutate(rows)
    report = validate_rows(rows, recipe)
    assert_caught(report, rule, row_id, words)
    assert f"| {words} |" in report.to_markdown()


def test_only_the_broken_rule_fails_and_counts_every_offending_row():
    rows = if_rows(30)
    for row in rows[5:]:
        row["prompt"] = ""
    report = validate_rows(rows, "instruction_following")
    (failure,) = report.failures()
    assert failure.name == "prompt_non_empty" and failure.unexpected_count == 25
    assert failure.unexpected_ids == [f"if-0-{i:05d}" for i in range(5, 5 + SHOWN_IDS)]
    assert failure.message.endswith("...")


def test_no_rows_fails_with_at_least_one_row():
    report = validate_rows([], "search")
    assert "has_rows" in {r.name for r in report.failures()}
    assert "there is at least one row" in report.to_markdown()


def test_optional_fields_are_checked_only_in_rows_that_set_them():
    rows = search_rows()
    rows[0]["step_limit"] = 3
    del rows[1]["max_turns"]
    assert validate_rows(rows, "search").success


def test_the_error_pickles_with_its_report():
    rows = if_rows()
    rows[0]["prompt"] = ""
    error = pickle.loads(pickle.dumps(DataValidationError(validate_rows(rows, "instruction_following"))))
    assert error.report.failures()[0].name == "prompt_non_empty" and "if-0-00000" in str(error)


@pytest.mark.parametrize("recipe", recipe_names())
def test_every_registered_recipe_has_a_suite(recipe):
    own = {rule.name for rule in recipe_rules(recipe)} - {rule.name for rule in common_rules(recipe)}
    assert own, f"{recipe}'s suite checks none of the fields its harness reads"


def test_unknown_recipes_are_named_and_a_recipe_without_a_suite_gets_the_common_rules(monkeypatch):
    with pytest.raises(KeyError, match="unknown recipe 'chess'"):
        recipe_rules("chess")

    class Own:
        def task_rules(self):
            return required_field("question", "text")

    class Bare:
        pass

    monkeypatch.setattr("rollouts.registry.get_recipe", lambda name: {"own": Own(), "bare": Bare()}[name])
    assert [r.name for r in recipe_rules("bare")] == [r.name for r in common_rules("bare")]
    assert {r.name for r in recipe_rules("own")} - {r.name for r in common_rules("own")} == {
        "question_exists", "question_not_null", "question_non_empty"}
    report = validate_rows([{"id": "a", "recipe": "own", "question": ""}], "own")
    assert not report.success and [f.name for f in report.failures()] == ["question_non_empty"]
