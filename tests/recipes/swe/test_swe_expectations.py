"""The SWE dataset suites on raw rows: good rows pass with their test counts, each kind of bad row is named with its
rule, empty problem statements are reported as warnings without failing the suite."""

from __future__ import annotations

import copy

import pytest

from recipes.swe.datasets import load_raw_swe_rows
from recipes.swe.expectations import REQUIRED_COLUMNS, TESTS_STAT, count_tests, swe_rules, validate_swe_rows
from rollouts.expectations import require_valid
from tests.recipes.support import assert_caught, duplicate_value
from tests.recipes.support import drop_everywhere as _drop_everywhere
from tests.recipes.support import set_value as _set
from tests.recipes.swe.test_datasets import SMITH_ROWS, VERIFIED_ROWS, write_rows

ROWS = {"swe-bench-verified": VERIFIED_ROWS, "swe-smith": SMITH_ROWS}
IDS = {kind: [row["instance_id"] for row in rows] for kind, rows in ROWS.items()}


def rows_of(kind: str) -> list[dict]:
    return copy.deepcopy(ROWS[kind])


@pytest.mark.parametrize("kind", ["swe-bench-verified", "swe-smith"])
def test_good_rows_pass_and_report_their_test_counts(kind):
    report = validate_swe_rows(rows_of(kind), kind)
    assert report.success and not report.warnings(), report.to_markdown()
    assert require_valid(report) is report and report.recipe == kind and report.n_rows == 2
    names = {r.name for r in report.expectations}
    assert {f"{c}_exists" for c in REQUIRED_COLUMNS[kind]} | {"instance_id_unique", "FAIL_TO_PASS_non_empty",
                                                              "image_name_or_repo"} <= names
    totals = {"swe-bench-verified": [3, 1], "swe-smith": [3, 2]}[kind]
    assert report.stats[TESTS_STAT] == {"min": min(totals), "max": max(totals), "mean": sum(totals) / 2, "rows": 2}
    assert f"| {TESTS_STAT} | {min(totals)} | {max(totals)} | {sum(totals) / 2:.2f} | 2 |" in report.to_markdown()


def test_raw_rows_loaded_from_a_parquet_file_pass(tmp_path):
    path = write_rows(VERIFIED_ROWS, tmp_path / "verified.parquet")
    report = validate_swe_rows(load_raw_swe_rows(str(path), "swe-bench-verified", cache_dir=tmp_path),
                               "swe-bench-verified")
    assert report.success, report.to_markdown()


def test_count_tests_reads_lists_and_json_text_and_skips_what_does_not_parse():
    rows = [{"FAIL_TO_PASS": ["a", "b"], "PASS_TO_PASS": '["c"]'}, {"FAIL_TO_PASS": '["d"]', "PASS_TO_PASS": "bad"},
            {"FAIL_TO_PASS": "[]", "PASS_TO_PASS": []}]
    assert count_tests(rows) == {"FAIL_TO_PASS": {"min": 0, "max": 2, "mean": 1.0, "rows": 3},
                                 "PASS_TO_PASS": {"min": 0, "max": 1, "mean": 0.5, "rows": 2},
                                 TESTS_STAT: {"min": 0, "max": 3, "mean": 1.5, "rows": 2}}


def _no_image_nor_repo(rows: list[dict]) -> None:
    rows[1]["image_name"] = None
    rows[1]["repo"] = ""


V, S = IDS["swe-bench-verified"], IDS["swe-smith"]
# (dataset, how the rows are broken, rule that must fail, row it must name, words of the rule)
BAD_ROWS = [
    ("swe-bench-verified", _drop_everywhere("test_patch"), "test_patch_exists", V[0], "column test_patch is present"),
    ("swe-bench-verified", _drop_everywhere("environment_setup_commit"), "environment_setup_commit_exists", V[1],
     "column environment_setup_commit is present"),
    ("swe-smith", _drop_everywhere("FAIL_TO_PASS"), "FAIL_TO_PASS_exists", S[0], "column FAIL_TO_PASS is present"),
    ("swe-bench-verified", duplicate_value(1, "instance_id", 0), "instance_id_unique", V[0], "instance_id is unique"),
    ("swe-smith", duplicate_value(1, "instance_id", 0), "instance_id_unique", S[0], "instance_id is unique"),
    ("swe-smith", _set(1, "instance_id", None), "instance_id_not_null", "row 1", "instance_id is set in every row"),
    ("swe-bench-verified", _set(0, "instance_id", " "), "instance_id_non_empty", "row 0",
     "instance_id is a non-empty string"),
    ("swe-bench-verified", _set(1, "FAIL_TO_PASS", "[]"), "FAIL_TO_PASS_non_empty", V[1],
     "FAIL_TO_PASS holds at least one test"),
    ("swe-smith", _set(0, "FAIL_TO_PASS", []), "FAIL_TO_PASS_non_empty", S[0], "FAIL_TO_PASS holds at least one test"),
    ("swe-bench-verified", _set(0, "FAIL_TO_PASS", "[oops"), "FAIL_TO_PASS_is_test_list", V[0],
     "FAIL_TO_PASS is a list of test ids or JSON text of one"),
    ("swe-smith", _set(1, "PASS_TO_PASS", [1, 2]), "PASS_TO_PASS_is_test_list", S[1],
     "PASS_TO_PASS is a list of test ids or JSON text of one"),
    ("swe-smith", _set(1, "PASS_TO_PASS", None), "PASS_TO_PASS_not_null", S[1], "PASS_TO_PASS is set in every row"),
    ("swe-bench-verified", _set(1, "patch", ""), "patch_non_empty", V[1], "patch is a non-empty string"),
    ("swe-smith", _set(0, "patch", None), "patch_not_null", S[0], "patch is set in every row"),
    ("swe-smith", _no_image_nor_repo, "image_name_or_repo", S[1], "image_name or repo is a non-empty string"),
    ("swe-bench-verified", _set(0, "repo", None), "image_name_or_repo", V[0],
     "image_name or repo is a non-empty string"),
]


@pytest.mark.parametrize(("kind", "mutate", "rule", "row_id", "words"), BAD_ROWS,
                         ids=[f"{case[0]}-{case[2]}-{index}" for index, case in enumerate(BAD_ROWS)])
def test_each_kind_of_bad_row_is_caught_naming_the_row_and_the_rule(kind, mutate, rule, row_id, words):
    rows = rows_of(kind)
    mutate(rows)
    assert_caught(validate_swe_rows(rows, kind), rule, row_id, words)


@pytest.mark.parametrize(("kind", "statement", "rule"), [("swe-smith", "  \n", "problem_statement_non_empty"),
                                                         ("swe-bench-verified", None, "problem_statement_not_null")])
def test_empty_problem_statements_are_warnings_that_name_the_row(kind, statement, rule):
    rows = rows_of(kind)
    rows[1]["problem_statement"] = statement
    report = validate_swe_rows(rows, kind)
    assert report.success and not report.failures(), report.to_markdown()
    (warning,) = report.warnings()
    assert warning.name == rule and not warning.blocking and warning.unexpected_ids == [IDS[kind][1]]
    assert IDS[kind][1] in warning.message and warning.message.endswith("(warning)")
    assert require_valid(report) is report
    markdown = report.to_markdown()
    assert "passed, 1 warning(s)" in markdown and f"| warning | 1 | `{IDS[kind][1]}` |" in markdown


def test_a_warning_does_not_hide_a_blocking_failure():
    rows = rows_of("swe-smith")
    rows[0]["problem_statement"] = ""
    rows[1]["FAIL_TO_PASS"] = []
    report = validate_swe_rows(rows, "swe-smith")
    assert not report.success
    assert [r.name for r in report.failures()] == ["FAIL_TO_PASS_non_empty"]
    assert [r.name for r in report.warnings()] == ["problem_statement_non_empty"]


def test_no_rows_fail_and_unknown_datasets_have_no_suite():
    assert "has_rows" in {r.name for r in validate_swe_rows([], "swe-smith").failures()}
    with pytest.raises(KeyError, match="no expectation suite for SWE dataset 'swe-bench'"):
        swe_rules("swe-bench")  # type: ignore[arg-type]
