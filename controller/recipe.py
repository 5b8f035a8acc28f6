"""The recipe seam: what the controller needs from a recipe (task source, harness command, grader).

A harness is an ordinary program. It receives only the harness contract:
  OPENAI_BASE_URL  the rollout's gateway URL ({gateway}/r/{rollout_id}/v1)
  OPENAI_API_KEY   the rollout's own key
  HARNESSRL_TASK   path to the task input (the rollout's `input`) as JSON
and a working directory. It knows nothing else of harnessrl.

Grading happens after the harness exited, in the controller's process (or a fresh sandbox), never inside the harness:
the grader reads the task, the harness's working directory and the rollout's recorded calls, and returns a `Grade`.
The controller posts it with the grader credential. The working directory is hostile input: before the grader runs,
the controller surveys it without following links (`sandbox.hostile_tree`), and a tree past the recipe's caps, with a
link out of it or a name no report can carry is the agent's failure (reward 0); a grader reads files in it only
through `sandbox.hostile_tree.read_file` or in a sandbox of its own, never by following a path as it stands.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from gateway.records import CallRecord

TASK_FILE = "task.json"


class GraderInfraError(RuntimeError):
    """A grader's own failure that the policy cannot cause (its store or cluster unreachable, its sandbox not
    buildable): the rollout fails as `infra`. Any other exception a grader raises is the agent's failure (reward 0),
    since a grader reads what the policy wrote and a crash on that input is the policy's doing."""


@dataclass(frozen=True)
class GradeInput:
    """Everything a grader may look at."""

    task: dict[str, Any]  # the rollout's input, as given to the harness
    workdir: Path  # the harness's working directory after it exited
    calls: Sequence[CallRecord]  # the rollout attempt's recorded calls, in seq order
    exit_code: int | None  # the harness's exit code (None when it was killed)


@dataclass(frozen=True)
class Grade:
    """A grader's verdict."""

    reward: float  # the scalar reward, in the recipe's documented range
    details: dict[str, Any] = field(default_factory=dict)  # per-check results, for humans and MLflow


class Recipe(Protocol):
    """One recipe: tasks, the harness that attempts them, the grader that scores them."""

    name: str

    def generate(self, count: int, seed: int) -> list[dict[str, Any]]:
        """`count` tasks, reproducible from `seed`; each has a unique "id"."""
        ...

    def harness_command(self) -> list[str]:
        """The command that runs the harness (run in the rollout's working directory with the contract env)."""
        ...

    def prepare_workdir(self, task: dict[str, Any], workdir: Path) -> None:
        """Lay out the working directory before the harness starts (the task file is written by the controller)."""
        ...

    def grade(self, graded: GradeInput) -> Grade:
        """Score a finished attempt. Raise GraderInfraError for the grader's own infrastructure failures; anything
        else raised counts as the agent's failure. Optional attribute `tree_limits` (sandbox.hostile_tree.TreeLimits):
        the caps the working directory must stay within before this is called (default TreeLimits())."""
        ...


def final_text(calls: Sequence[CallRecord]) -> str:
    """The text of the last successful call's answer ('' when there is none): what most graders score."""
    for call in reversed(calls):
        if call.status == "ok" and call.response_text is not None:
            return call.response_text
    return ""
