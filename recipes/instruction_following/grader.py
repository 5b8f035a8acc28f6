"""The instruction-following grader: reward = fraction of the task's instructions the final answer follows."""

from __future__ import annotations

from typing import Any

from controller.recipe import Grade, GradeInput, final_text
from recipes.instruction_following.instructions import kind_of


def check_all(text: str, instructions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per-instruction verdicts: kind, params, followed."""
    return [{"kind": item["kind"], "params": item["params"],
             "followed": bool(kind_of(item["kind"]).check(text, item["params"]))} for item in instructions]


def score_text(text: str, instructions: list[dict[str, Any]]) -> Grade:
    """Grade one response: an empty response scores 0 (an empty text trivially avoids commas and forbidden words)."""
    if not instructions:
        raise ValueError("a task needs at least one instruction; regenerate it with tasks.generate")
    if not text.strip():
        return Grade(reward=0.0, details={"reason": "empty response", "instructions": check_all(text, instructions)})
    verdicts = check_all(text, instructions)
    followed_count = sum(verdict["followed"] for verdict in verdicts)
    return Grade(reward=followed_count / len(verdicts),
                 details={"instructions": verdicts, "followed_count": followed_count,
                          "all_followed": followed_count == len(verdicts)})


def grade(graded: GradeInput) -> Grade:
    """Score the rollout's last successful answer against the task's instructions."""
    return score_text(final_text(graded.calls), graded.task["instructions"])
