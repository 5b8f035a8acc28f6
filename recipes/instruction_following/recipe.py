"""The instruction_following recipe (the default recipe for RLOO): IFEval-style tasks, one-call harness, checks."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel

from controller.recipe import Grade, GradeInput
from recipes.instruction_following import grader, tasks
from rollouts.expectations import Rule, required_field
from rollouts.task_options import SamplingFields


@dataclass(frozen=True)
class InstructionFollowingRecipe:
    """Rewards in [0, 1]: the fraction of instructions followed."""

    name: str = "instruction_following"
    task_fields: ClassVar[type[BaseModel]] = SamplingFields  # what rollout.task_overrides may set
    no_signal_hint: ClassVar[str] = (  # the loop's advice after an iteration without reward variance
        "lower the number of instructions per task or use a larger model")

    def generate(self, count: int, seed: int) -> list[dict[str, Any]]:
        return tasks.generate(count, seed)

    def harness_command(self) -> list[str]:
        return [sys.executable, "-m", "recipes.instruction_following.harness"]

    def prepare_workdir(self, task: dict[str, Any], workdir: Path) -> None:
        """Nothing to lay out: the prompt is in the task file."""

    def grade(self, graded: GradeInput) -> Grade:
        return grader.grade(graded)

    def task_rules(self) -> list[Rule]:
        """The data suite's hook: a prompt and known instructions."""
        from recipes.instruction_following.instructions import KINDS

        known = {kind.name for kind in KINDS}

        def bad_instructions(items: Any) -> int:
            if not isinstance(items, list):
                return 0  # the list rule reports it
            return sum(not (isinstance(i, dict) and i.get("kind") in known and isinstance(i.get("params"), dict))
                       for i in items)

        return [*required_field("prompt", "text"), *required_field("instructions", "list"),
                Rule("instructions_known", "instructions", "custom",
                     "every instruction is {kind, params} with a known kind", derive=bad_instructions)]


RECIPE = InstructionFollowingRecipe()
