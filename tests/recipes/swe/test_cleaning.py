"""The cleaning steps on a fixture mixing good and bad normalised rows: exact counts and reasons per step."""

from __future__ import annotations

import pytest

from recipes.swe.cleaning import (
    StepResult,
    drop_empty_statements,
    drop_missing_environment,
    drop_too_many_tests,
    n_tests,
    step_counts,
)


def row(instance_id: str, **fields) -> dict:
    """A normalised instance (recipes.swe.instances schema) with one passing and one failing test by default."""
    return {"instance_id": instance_id, "source": "swe-smith", "repo": "harnessrl/local__tiny.0123abcd",
            "base_commit": "0123abcd" * 5, "problem_statement": f"{instance_id} is broken", "FAIL_TO_PASS": ["t::a"],
            "PASS_TO_PASS": ["t::b"], "image_name": None, "bug_patch": "diff", "fix_patch": "diff", "test_patch": None,
            "created_at": None, "version": None, "environment_setup_commit": None, **fields}


def many(count: int) -> list[str]:
    return [f"tests/test_x.py::test_{i}" for i in range(count)]


FIXTURE = [
    row("good-1"),
    row("empty-statement", problem_statement=""),
    row("blank-statement", problem_statement="  \n\t "),
    row("none-statement", problem_statement=None),
    row("no-env"),
    row("good-2", FAIL_TO_PASS=many(100), PASS_TO_PASS=many(100)),  # exactly 200: kept
    row("too-many", FAIL_TO_PASS=many(1), PASS_TO_PASS=many(200)),
    row("too-many-and-no-env", FAIL_TO_PASS=many(150), PASS_TO_PASS=many(51)),
    row("good-3", PASS_TO_PASS=[]),
    row("missing-lists", FAIL_TO_PASS=None, PASS_TO_PASS=None),
]
AVAILABILITY = {r["instance_id"]: r["instance_id"] not in ("no-env", "too-many-and-no-env") for r in FIXTURE}


def pipeline(rows: list[dict]) -> list[StepResult]:
    first = drop_empty_statements(rows)
    second = drop_missing_environment(first.kept, AVAILABILITY)
    third = drop_too_many_tests(second.kept)
    return [first, second, third]


def test_each_step_drops_exactly_its_bad_rows_with_a_reason():
    first, second, third = pipeline(FIXTURE)
    assert first.counts() == {"in": 10, "kept": 7, "dropped": 3}
    assert first.dropped == [("empty-statement", "problem_statement is empty"),
                             ("blank-statement", "problem_statement is empty"),
                             ("none-statement", "problem_statement is NoneType, not text")]
    assert second.counts() == {"in": 7, "kept": 5, "dropped": 2}
    assert second.dropped == [("no-env", "environment missing"), ("too-many-and-no-env", "environment missing")]
    assert third.counts() == {"in": 5, "kept": 4, "dropped": 1}
    assert third.dropped == [("too-many", "201 tests > 200")]
    assert [r["instance_id"] for r in third.kept] == ["good-1", "good-2", "good-3", "missing-lists"]
    assert step_counts([first, second, third]) == {
        "drop_empty_statements": {"in": 10, "kept": 7, "dropped": 3},
        "drop_missing_environment": {"in": 7, "kept": 5, "dropped": 2},
        "drop_too_many_tests": {"in": 5, "kept": 4, "dropped": 1}}


def test_steps_keep_rows_unchanged_and_in_order():
    result = drop_too_many_tests(FIXTURE, max_tests=2)
    assert all(kept is original for kept, original in zip(result.kept, [r for r in FIXTURE if n_tests(r) <= 2],
                                                          strict=True))
    assert [iid for iid, _ in result.dropped] == ["good-2", "too-many", "too-many-and-no-env"]


def test_reasons_from_the_backend_name_what_is_missing():
    result = drop_missing_environment([row("a"), row("b")], {"a": False, "b": True},
                                      reasons={"a": "image swebench/x:latest is not in http://registry"})
    assert result.dropped == [("a", "environment missing: image swebench/x:latest is not in http://registry")]


def test_an_unanswered_row_is_an_error_not_a_silent_drop():
    with pytest.raises(ValueError, match=r"no answer for 1 instance\(s\), e.g. \['b'\]"):
        drop_missing_environment([row("a"), row("b")], {"a": True})
    with pytest.raises(ValueError, match="max_tests=0"):
        drop_too_many_tests(FIXTURE, max_tests=0)
