"""great-expectations suites for SWE-smith and SWE-bench Verified rows, run on the RAW rows (the dataset's own
columns, as `load_raw_swe_rows` returns them), before normalisation: a missing column or a malformed test list is then
reported per row, naming the row and the rule, instead of stopping the load at the first bad row.

Order of use: load raw rows -> `validate_swe_rows` -> `require_valid` -> normalise -> clean. Empty problem
statements are warnings (non-blocking): reported here, dropped by the cleaning step. The report's `stats` hold the
test counts per row (FAIL_TO_PASS, PASS_TO_PASS and their sum): min, max, mean and rows counted.
"""

from __future__ import annotations

from typing import Any

from recipes.swe.instances import SOURCES, TEST_FIELDS, InstanceError, Source, parse_test_list
from rollouts.expectations import Rule, ValidationReport, validate_rules

ID_COLUMN = "instance_id"
# The columns each dataset's rows must have (its own schema; others, e.g. hints_text or created_at, are optional).
REQUIRED_COLUMNS: dict[str, tuple[str, ...]] = {
    "swe-smith": ("instance_id", "patch", "FAIL_TO_PASS", "PASS_TO_PASS", "problem_statement"),
    "swe-bench-verified": ("repo", "instance_id", "base_commit", "patch", "test_patch", "problem_statement",
                           "FAIL_TO_PASS", "PASS_TO_PASS", "version", "environment_setup_commit"),
}
TESTS_STAT = "tests (FAIL_TO_PASS + PASS_TO_PASS)"


def parsed_tests(value: Any) -> list[str] | None:
    """A test list stored as a list or as JSON text; None when it is neither."""
    try:
        return parse_test_list(value, "?", "tests")
    except InstanceError:
        return None


def _not_a_test_list(value: Any) -> int:
    return 0 if parsed_tests(value) is not None else 1


def _no_test(value: Any) -> int:
    return 1 if parsed_tests(value) == [] else 0


def _no_image_nor_repo(row: dict[str, Any]) -> int:
    return 0 if any(isinstance(row[c], str) and row[c].strip() for c in ("image_name", "repo")) else 1


def swe_rules(kind: Source) -> list[Rule]:
    """The suite of `kind` ("swe-smith" or "swe-bench-verified")."""
    if kind not in REQUIRED_COLUMNS:
        raise KeyError(f"no expectation suite for SWE dataset {kind!r}; known: {', '.join(SOURCES)}")
    rules = [Rule("has_rows", "", "rows", "there is at least one row"),
             *(Rule(f"{column}_exists", column, "exists", f"column {column} is present")
               for column in REQUIRED_COLUMNS[kind]),
             Rule("instance_id_not_null", ID_COLUMN, "not_null", "instance_id is set in every row"),
             Rule("instance_id_non_empty", ID_COLUMN, "text", "instance_id is a non-empty string"),
             Rule("instance_id_unique", ID_COLUMN, "unique", "instance_id is unique"),
             Rule("problem_statement_not_null", "problem_statement", "not_null",
                  "problem_statement is set in every row", blocking=False),
             Rule("problem_statement_non_empty", "problem_statement", "text",
                  "problem_statement is a non-empty string", blocking=False),
             Rule("patch_not_null", "patch", "not_null", "patch is set in every row"),
             Rule("patch_non_empty", "patch", "text", "patch is a non-empty string")]
    for field in TEST_FIELDS:
        rules += [Rule(f"{field}_not_null", field, "not_null", f"{field} is set in every row"),
                  Rule(f"{field}_is_test_list", field, "custom",
                       f"{field} is a list of test ids or JSON text of one", derive=_not_a_test_list)]
    return [*rules,
            Rule("FAIL_TO_PASS_non_empty", "FAIL_TO_PASS", "custom", "FAIL_TO_PASS holds at least one test",
                 derive=_no_test),
            Rule("image_name_or_repo", "image_name/repo", "row", "image_name or repo is a non-empty string",
                 inputs=("image_name", "repo"), derive=_no_image_nor_repo)]


def count_tests(rows: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """min, max, mean and rows counted of the test counts per row (rows whose lists do not parse left out)."""
    counts: dict[str, list[int]] = {field: [] for field in (*TEST_FIELDS, TESTS_STAT)}
    for row in rows:
        parsed = [parsed_tests(row.get(field)) for field in TEST_FIELDS]
        for field, tests in zip(TEST_FIELDS, parsed, strict=True):
            if tests is not None:
                counts[field].append(len(tests))
        if all(tests is not None for tests in parsed):
            counts[TESTS_STAT].append(sum(len(tests) for tests in parsed if tests is not None))
    return {name: {"min": float(min(values)), "max": float(max(values)), "mean": sum(values) / len(values),
                   "rows": float(len(values))} for name, values in counts.items() if values}


def validate_swe_rows(rows: list[dict[str, Any]], kind: Source) -> ValidationReport:
    """Run `kind`'s suite on raw rows, naming rows by instance_id (nothing raised: see `require_valid`)."""
    return validate_rules(rows, swe_rules(kind), suite=kind, id_column=ID_COLUMN, stats=count_tests(rows))
