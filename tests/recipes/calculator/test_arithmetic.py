"""The calculator's parser: exact arithmetic on a table of expressions, and a refusal, naming the problem, of
anything that is not arithmetic (names, calls, exponents, huge numbers, deep nesting)."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from recipes.calculator.arithmetic import (
    MAX_DEPTH,
    MAX_DIGITS,
    MAX_LENGTH,
    ExpressionError,
    calculate,
    evaluate,
    format_number,
)

COMPUTED = [
    ("317 * 46", "14582"),
    ("317*46", "14582"),
    ("128 + 96", "224"),
    ("  999 +\t1\n", "1000"),
    ("2 + 3 * 4", "14"),  # precedence
    ("(2 + 3) * 4", "20"),
    ("10 - 4 - 3", "3"),  # left associative
    ("100 / 10 / 5", "2"),
    ("-3 - -4", "1"),
    ("+5", "5"),
    ("-(2 + 3)", "-5"),
    ("7 / 2", "3.5"),
    ("1 / 3", "0.333333333333"),
    ("2 / 3", "0.666666666667"),
    ("1.5 * 2", "3"),
    ("0.1 + 0.2", "0.3"),  # exact, not binary floating point
    ("3 × 4", "12"),
    ("8 ÷ 2", "4"),
    ("((((1))))", "1"),
    ("0", "0"),
]

REFUSED = [
    ("", "empty expression"),
    ("   ", "empty expression"),
    ("__import__('os').system('id')", "'_' at position 0 is not arithmetic"),
    ("open('/etc/passwd')", "'o' at position 0 is not arithmetic"),
    ("2 ** 8", "'*' at position 3 where a number was expected"),
    ("2 ^ 8", "'^' at position 2 is not arithmetic"),
    ("1e9", "'e' at position 1 is not arithmetic"),
    ("0x10", "'x' at position 1 is not arithmetic"),
    ("1_000", "'_' at position 1 is not arithmetic"),
    ("3 % 2", "'%' at position 2 is not arithmetic"),
    ("1 << 3", "'<' at position 2 is not arithmetic"),
    ("abs(-1)", "'a' at position 0 is not arithmetic"),
    ("'1' + '2'", "\"'\" at position 0 is not arithmetic"),
    ("1, 2", "',' at position 1 is not arithmetic"),
    ("١ + 1", "at position 0 is not arithmetic"),  # a digit of another script
    ("1 +", "ends where a number was expected"),
    ("(1 + 2", "'(' at position 0 is never closed"),
    ("1 + 2)", "unexpected ')' at position 5"),
    ("1 2", "unexpected '2' at position 2"),
    ("()", "')' at position 1 where a number was expected"),
    ("1 / 0", "division by zero"),
    ("1 / (2 - 2)", "division by zero"),
    ("1.", "'.' at position 1 is not arithmetic"),
    ("9" * (MAX_DIGITS + 1), f"more than {MAX_DIGITS} digits"),
    (" * ".join(["9" * 20] * 2), f"a result with more than {MAX_DIGITS} digits"),
    ("1" + " / 7" * 40, f"a result with more than {MAX_DIGITS} digits"),
    ("(" * (MAX_DEPTH + 1) + "1" + ")" * (MAX_DEPTH + 1), f"more than {MAX_DEPTH} nested"),
    ("-" * (MAX_DEPTH + 2) + "1", f"more than {MAX_DEPTH} nested"),
    ("1+" * MAX_LENGTH + "1", f"at most {MAX_LENGTH}"),
]


@pytest.mark.parametrize(("expression", "value"), COMPUTED)
def test_arithmetic_is_computed_exactly(expression, value):
    assert calculate(expression) == value


@pytest.mark.parametrize(("expression", "problem"), REFUSED)
def test_anything_but_arithmetic_is_refused_naming_the_problem(expression, problem):
    with pytest.raises(ExpressionError) as refused:
        evaluate(expression)
    assert problem in str(refused.value)


@pytest.mark.parametrize("value", [None, 3, 3.5, ["1 + 1"], b"1 + 1"])
def test_a_value_that_is_not_text_is_refused(value):
    with pytest.raises(ExpressionError, match="must be text"):
        evaluate(value)


@given(st.integers(100, 999), st.integers(10, 99))
def test_sums_and_products_of_the_tasks_operands_match_python(left, right):
    assert calculate(f"{left} + {right}") == str(left + right)
    assert calculate(f"{left} * {right}") == str(left * right)


@given(st.text(max_size=80))
def test_any_text_is_computed_or_refused_never_crashes(text):
    try:
        value = evaluate(text)
    except ExpressionError:
        return
    assert isinstance(value, Fraction)


def test_format_number_rounds_and_keeps_the_sign():
    assert format_number(Fraction(-7, 2)) == "-3.5"
    assert format_number(Fraction(-1, 3)) == "-0.333333333333"
    assert format_number(Fraction(1, 10**15)) == "0"
    assert format_number(Fraction(14582)) == "14582"
