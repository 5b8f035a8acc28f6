"""The calculator recipe: arithmetic a small model cannot do in its head, a `calculator` tool it can call through the
anthropic SDK's tool runner (Messages, translated by the gateway), an exact-match grader."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, Field

from controller.recipe import Grade, GradeInput
from recipes.calculator import grader, tasks
from rollouts.expectations import Rule, integer_field, required_field
from rollouts.task_options import SamplingFields

GRADER_ONLY_FIELDS = ("answer",)  # in the rollout's input, never in the harness's task file


class CalculatorTaskFields(SamplingFields):
    """The task fields the calculator harness reads besides the question."""

    max_turns: int | None = Field(default=None, ge=1, description="Model calls per rollout (default 4).")
    force_tool: bool | None = Field(default=None, description="The first turn must call the tool (default true).")


@dataclass(frozen=True)
class CalculatorRecipe:
    """Rewards in {0, 1}: the final answer's number equals the expression's value."""

    name: str = "calculator"
    task_fields: ClassVar[type[BaseModel]] = CalculatorTaskFields  # what rollout.task_overrides may set
    no_signal_hint: ClassVar[str] = (  # the loop's advice after an iteration without reward variance
        "the policy must call the calculator and state its result sometimes: check that the engine honours "
        "tool_choice (the harness forces the first call), or use a larger model")

    def generate(self, count: int, seed: int) -> list[dict[str, Any]]:
        return tasks.generate(count, seed)

    def harness_command(self) -> list[str]:
        return [sys.executable, "-m", "recipes.calculator.harness"]

    def harness_task(self, task: dict[str, Any]) -> dict[str, Any]:
        """The task file without the answer (the grader re-evaluates the expression; the policy reads every file)."""
        return {key: value for key, value in task.items() if key not in GRADER_ONLY_FIELDS}

    def prepare_workdir(self, task: dict[str, Any], workdir: Path) -> None:
        """Nothing to lay out: the question is in the task file."""

    def grade(self, graded: GradeInput) -> Grade:
        return grader.grade(graded)

    def task_rules(self) -> list[Rule]:
        """The data suite's hook: a question, an arithmetic expression and its integer value as the answer."""
        from recipes.calculator.arithmetic import ExpressionError, evaluate

        def answer_disagrees(row: dict[str, Any]) -> int:
            """1 when the expression is not arithmetic, or its value is not the row's integer answer."""
            answer = row["answer"]
            try:
                value = evaluate(row["expression"])
            except ExpressionError:
                return 1
            return int(not (isinstance(answer, int) and not isinstance(answer, bool) and value == answer))

        return [*required_field("question", "text"), *required_field("expression", "text"),
                Rule("answer_exists", "answer", "exists", "column answer is present"),
                Rule("answer_not_null", "answer", "not_null", "answer is set in every row"),
                Rule("answer_is_expression_value", "answer", "row",
                     "expression is arithmetic and answer is its integer value", derive=answer_disagrees,
                     inputs=("expression", "answer")),
                *integer_field("max_turns", min_value=1)]


RECIPE = CalculatorRecipe()
