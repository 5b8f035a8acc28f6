"""The instruction_following recipe (the default recipe for RLOO): IFEval-style tasks, one-call harness, checks."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel

from controller.recipe import Grade, GradeInput
from recipes.instruction_following import grader, tasks
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


RECIPE = InstructionFollowingRecipe()
