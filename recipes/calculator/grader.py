"""The calculator grader: reward 1.0 when the last number of the model's final text equals the task's expression's
exact value, else 0.0. Only the recorded calls are read (never the harness's output or working directory); the truth
is re-evaluated from the task's expression. Details count the calls and the answers that called a tool."""

from __future__ import annotations

from typing import Any

from controller.recipe import Grade, GradeInput, final_text
from recipes.calculator.answers import last_number_text, stated_number
from recipes.calculator.arithmetic import evaluate, format_number
from recipes.calculator.tool_calls import tool_call_answers

SHOWN_CHARS = 200  # of the final text, kept in the details


def score_text(text: str, expression: str) -> Grade:
    """Grade one final text against `expression`'s value (ExpressionError for a task whose expression is not
    arithmetic: the task is broken, not the answer)."""
    expected = evaluate(expression)
    stated = stated_number(text)
    details: dict[str, Any] = {"expected": format_number(expected), "answer_text": text[-SHOWN_CHARS:]}
    if stated is None:
        written = last_number_text(text)
        reason = "the final text states no number" if written is None else "the final number is too long"
        return Grade(reward=0.0, details={**details, "reason": reason, "correct": False})
    correct = stated == expected
    return Grade(reward=1.0 if correct else 0.0,
                 details={**details, "stated": format_number(stated), "correct": correct})


def grade(graded: GradeInput) -> Grade:
    """Score the rollout's last successful answer; details also count its calls and the answers that called a tool."""
    verdict = score_text(final_text(graded.calls), graded.task["expression"])
    return Grade(reward=verdict.reward, details={**verdict.details, "calls": len(graded.calls),
                                                 "tool_calls": tool_call_answers(graded.calls)})
