"""The search grader: reward 1.0 when the answer in the rollout's last reply matches a gold answer exactly
(after normalisation), else 0.0."""

from __future__ import annotations

from controller.recipe import Grade, GradeInput, final_text
from recipes.search.actions import ActionKind, parse_action
from recipes.search.answers import exact_match, normalize_answer


def score_reply(reply: str, answers: list[str]) -> Grade:
    """Grade the final reply's `<answer>` against the gold answers."""
    action = parse_action(reply)
    if action.kind is not ActionKind.ANSWER:
        return Grade(reward=0.0, details={"reason": f"the last reply has no answer ({action.kind})",
                                          "gold": answers})
    matched = exact_match(action.content, answers)
    return Grade(reward=1.0 if matched else 0.0,
                 details={"answer": action.content, "normalized": normalize_answer(action.content),
                          "gold": answers, "exact_match": matched})


def grade(graded: GradeInput) -> Grade:
    """Score the rollout's last successful reply; details also count its calls."""
    verdict = score_reply(final_text(graded.calls), graded.task["answers"])
    return Grade(reward=verdict.reward, details={**verdict.details, "calls": len(graded.calls)})
