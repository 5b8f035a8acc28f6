"""The search recipe (the default recipe for GRPO): Search-R1-style questions over a generated world; EM reward."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, Field

from controller.recipe import Grade, GradeInput
from recipes.search import grader, tasks
from recipes.search.corpus import build_world, documents
from recipes.search.retrieval import CORPUS_FILE, write_corpus
from rollouts.expectations import Rule, integer_field, required_field
from rollouts.task_options import SamplingFields

GRADER_ONLY_FIELDS = ("answers", "evidence")  # in the rollout's input, never in the harness's task file


class SearchTaskFields(SamplingFields):
    """The task fields the search harness reads besides the question."""

    max_turns: int | None = Field(default=None, ge=1, description="Model calls per rollout.")
    top_k: int | None = Field(default=None, ge=1, description="Documents per search.")


@dataclass(frozen=True)
class SearchRecipe:
    """Rewards in {0, 1}: exact match of the final answer."""

    name: str = "search"
    task_fields: ClassVar[type[BaseModel]] = SearchTaskFields  # what rollout.task_overrides may set
    no_signal_hint: ClassVar[str] = (  # the loop's advice after an iteration without reward variance
        "the policy needs to find and state the answer sometimes; use a larger model or easier questions")

    def generate(self, count: int, seed: int) -> list[dict[str, Any]]:
        return tasks.generate(count, seed)

    def harness_command(self) -> list[str]:
        return [sys.executable, "-m", "recipes.search.harness"]

    def harness_task(self, task: dict[str, Any]) -> dict[str, Any]:
        """The task file without the gold answers and the evidence's document ids (the grader's; the policy reads
        every file)."""
        return {key: value for key, value in task.items() if key not in GRADER_ONLY_FIELDS}

    def prepare_workdir(self, task: dict[str, Any], workdir: Path) -> None:
        """Write the task's corpus (rebuilt from its corpus_seed) as corpus.jsonl; the harness indexes it."""
        write_corpus(documents(build_world(task["corpus_seed"])), workdir / CORPUS_FILE)

    def grade(self, graded: GradeInput) -> Grade:
        return grader.grade(graded)

    def task_rules(self) -> list[Rule]:
        """The data suite's hook: a question, text answers and the world's seed."""
        def blank_answers(items: Any) -> int:
            if not isinstance(items, list):
                return 0  # the list rule reports it
            return sum(not (isinstance(a, str) and a.strip()) for a in items)

        return [*required_field("question", "text"), *required_field("answers", "list"),
                Rule("answers_are_text", "answers", "custom", "every answer is a non-empty string",
                     derive=blank_answers),
                *integer_field("corpus_seed", required=True), *integer_field("hops", 1, 2),
                *integer_field("max_turns", min_value=1), *integer_field("top_k", min_value=1)]


RECIPE = SearchRecipe()
