"""The multistep grader: reward = fraction of the task's parts whose reply follows that part's instruction.

The replies are the rollout's recorded calls (the gateway's record, which the policy cannot write), one per part in
call order; a part without a reply (the harness stopped early) or with an empty one scores 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from controller.recipe import Grade, GradeInput
from gateway.records import CallRecord
from recipes.instruction_following.instructions import kind_of


def part_replies(calls: Sequence[CallRecord]) -> list[str]:
    """The text of each successful policy call, in order (one per part); side calls (gateway `side_models`) are not
    replies to a part."""
    return [call.response_text or "" for call in calls if call.status == "ok" and not call.side]


def score_replies(replies: Sequence[str], steps: Sequence[dict[str, Any]]) -> Grade:
    """Grade the replies against the parts: per-part verdicts and the fraction followed."""
    if not steps:
        raise ValueError("a multistep task needs at least one part; regenerate it with recipes.multistep.tasks")
    verdicts = []
    for index, step in enumerate(steps):
        reply = replies[index] if index < len(replies) else None
        instruction = step["instruction"]
        followed = bool(reply and reply.strip() and kind_of(instruction["kind"]).check(reply, instruction["params"]))
        verdicts.append({"part": index + 1, "kind": instruction["kind"], "followed": followed,
                         "answered": reply is not None})
    followed_count = sum(v["followed"] for v in verdicts)
    return Grade(reward=followed_count / len(steps),
                 details={"parts": verdicts, "followed_count": followed_count, "replies": len(replies),
                          "all_followed": followed_count == len(steps)})


def grade(graded: GradeInput) -> Grade:
    """Score the rollout's recorded replies against the task's parts."""
    return score_replies(part_replies(graded.calls), graded.task["steps"])
