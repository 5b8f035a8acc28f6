"""Calculator tasks (seeded, unique ids, the operands' ranges, the data suite) and the grader (exact match of the
final text's last number, malformed answers 0, hostile text never raising)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controller.recipe import GradeInput
from controller.recipes import get_recipe
from recipes.calculator.answers import stated_number
from recipes.calculator.grader import grade, score_text
from recipes.calculator.tasks import generate, make_task
from rollouts.expectations import validate_rows
from tests.recipes.support import assert_caught, call_record, set_value

TASKS = generate(400, seed=0)


def test_same_seed_same_tasks_other_seed_other_tasks():
    assert generate(50, seed=3) == generate(50, seed=3)
    assert generate(50, seed=3) != generate(50, seed=4)
    assert generate(10, seed=3) == generate(50, seed=3)[:10]
    assert get_recipe("calculator").generate(5, seed=3) == generate(5, seed=3)


def test_ids_are_unique_and_across_seeds_too():
    assert len({task["id"] for task in TASKS}) == len(TASKS)
    assert not {t["id"] for t in generate(20, 1)} & {t["id"] for t in generate(20, 2)}


def test_sums_and_products_alternate_with_a_3_digit_and_a_2_digit_operand():
    assert [task["operation"] for task in TASKS[:4]] == ["sum", "product", "sum", "product"]
    for task in TASKS:
        left, symbol, right = task["expression"].split()
        assert 100 <= int(left) <= 999 and 10 <= int(right) <= 99
        assert symbol == {"sum": "+", "product": "*"}[task["operation"]]
        assert task["answer"] == (int(left) + int(right) if symbol == "+" else int(left) * int(right))
        assert task["question"] == f"What is {task['expression']}?"
    assert len({task["expression"] for task in TASKS}) > 390  # varied


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="count must be >= 0"):
        generate(-1, 0)
    with pytest.raises(ValueError, match="unknown operation 'power'; use one of sum, product"):
        make_task("x", 1, 2, "power")


def test_generated_rows_pass_the_data_suite():
    report = validate_rows([{**task, "recipe": "calculator"} for task in TASKS[:20]], "calculator")
    assert report.success, report.to_markdown()


@pytest.mark.parametrize(("mutate", "rule", "words"), [
    (set_value(3, "answer", 5), "answer_is_expression_value", "answer is its integer value"),
    (set_value(3, "answer", True), "answer_is_expression_value", "answer is its integer value"),
    (set_value(3, "expression", "__import__('os')"), "answer_is_expression_value", "expression is arithmetic"),
    (set_value(3, "question", "  "), "question_non_empty", "question is a non-empty string"),
    (set_value(3, "max_turns", 0), "max_turns_range", "max_turns is >= 1"),
])
def test_the_data_suite_catches_broken_rows(mutate, rule, words):
    rows = [{**task, "recipe": "calculator"} for task in TASKS[:6]]
    mutate(rows)
    assert_caught(validate_rows(rows, "calculator"), rule, rows[3]["id"], words)


@pytest.mark.parametrize(("text", "reward"), [
    ("The answer is 14582.", 1.0),
    ("317 * 46 = 14582", 1.0),
    ("14,582", 1.0),
    ("14582.0", 1.0),
    ("**14582**", 1.0),
    ("The answer is 14582. That is 317 times 46.", 0.0),  # the last number counts
    ("14583", 0.0),
    ("-14582", 0.0),
    ("14582.5", 0.0),
    ("145,82", 0.0),
    ("fourteen thousand five hundred eighty-two", 0.0),
    ("", 0.0),
    ("1" * 60, 0.0),
])
def test_exact_match_of_the_last_number(text, reward):
    assert score_text(text, "317 * 46").reward == reward


def test_details_say_why():
    none = score_text("no idea", "317 * 46")
    assert none.details == {"expected": "14582", "answer_text": "no idea", "reason": "the final text states no number",
                            "correct": False}
    long = score_text("9" * 60, "317 * 46")
    assert long.details["reason"] == "the final number is too long"
    assert score_text("14582", "317 * 46").details["stated"] == "14582"


def test_grade_reads_the_last_successful_call_and_counts_tool_calls():
    calls = [call_record(0, ""), call_record(1, "The answer is 224."), call_record(2, "boom", status="error")]
    tool_use = {"type": "tool_use", "id": "t", "name": "calculator", "input": {"expression": "128 + 96"}}
    calls[0] = calls[0].model_copy(update={"response_raw": json.dumps({"content": [tool_use]})})
    graded = grade(GradeInput(task=make_task("t", 128, 96, "sum"), workdir=None, calls=calls, exit_code=0))
    assert graded.reward == 1.0 and graded.details["tool_calls"] == 1 and graded.details["calls"] == 3


def test_the_truth_is_the_expression_not_the_rows_answer():
    task = {**make_task("t", 128, 96, "sum"), "answer": 5}
    calls = [call_record(0, "5")]
    assert grade(GradeInput(task=task, workdir=None, calls=calls, exit_code=0)).reward == 0.0


def test_no_calls_score_0():
    assert grade(GradeInput(task=make_task("t", 128, 96, "sum"), workdir=None, calls=[], exit_code=1)).reward == 0.0


@given(st.text(max_size=2000))
def test_hostile_text_never_raises(text):
    verdict = score_text(text, "317 * 46")
    assert verdict.reward in (0.0, 1.0)
    stated_number(text)


def test_huge_text_is_graded_from_its_end():
    assert score_text("9" * 100_000 + " so the answer is 14582", "317 * 46").reward == 1.0
    assert score_text(("1," * 50_000) + "x", "317 * 46").reward == 0.0
