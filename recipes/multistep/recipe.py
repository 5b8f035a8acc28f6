"""The multistep recipe: a piece written in 2-6 parts, one call per part, the context compacted every few parts, so
rollouts split into a varying number of training samples (the rollout-level ablation's recipe)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, Field

from controller.recipe import Grade, GradeInput
from recipes.multistep import grader, tasks
from rollouts.expectations import Rule, integer_field, required_field
from rollouts.task_options import SamplingFields


class MultistepTaskFields(SamplingFields):
    """The task fields the multistep harness reads besides its steps."""

    compact_above_tokens: int | None = Field(default=None, ge=1, description="Reply tokens since the last "
                                             "compaction past which the harness compacts its context.")


@dataclass(frozen=True)
class MultistepRecipe:
    """Rewards in [0, 1]: the fraction of parts whose reply follows its instruction."""

    name: str = "multistep"
    task_fields: ClassVar[type[BaseModel]] = MultistepTaskFields  # what rollout.task_overrides may set
    no_signal_hint: ClassVar[str] = (  # the loop's advice after an iteration without reward variance
        "give the parts easier instructions (recipes/multistep/tasks.py STEP_KINDS) or use a larger model")

    def generate(self, count: int, seed: int) -> list[dict[str, Any]]:
        return tasks.generate(count, seed)

    def harness_command(self) -> list[str]:
        return [sys.executable, "-m", "recipes.multistep.harness"]

    def prepare_workdir(self, task: dict[str, Any], workdir: Path) -> None:
        """Nothing to lay out: the parts are in the task file."""

    def grade(self, graded: GradeInput) -> Grade:
        return grader.grade(graded)

    def task_rules(self) -> list[Rule]:
        """The data suite's hook: a topic and parts with a request and a known instruction each."""
        from recipes.multistep.tasks import STEP_KINDS

        def bad_steps(items: Any) -> int:
            if not isinstance(items, list):
                return 0  # the list rule reports it
            return sum(not (isinstance(s, dict) and isinstance(s.get("request"), str)
                            and isinstance(s.get("instruction"), dict) and s["instruction"].get("kind") in STEP_KINDS)
                       for s in items)

        return [*required_field("topic", "text"), *required_field("steps", "list"),
                Rule("steps_known", "steps", "custom", "every part is {request, instruction} with a known kind",
                     derive=bad_steps), *integer_field("compact_above_tokens", min_value=1)]


RECIPE = MultistepRecipe()
