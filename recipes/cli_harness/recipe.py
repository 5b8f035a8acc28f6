"""The `claude-code` and `codex` recipes: the `swe` recipe's tasks, working directory and grader, with an unmodified
coding CLI as the harness instead of mini-swe-agent.

Everything but the harness is `recipes.swe.recipe.SweRecipe`'s (the same generated tasks, store, fresh-checkout grader,
local or in grading Jobs); this class only names the harness. The harness command carries the CLI's native binary by
absolute path, so the local runner's sandbox binds it read-only next to the harness's code (`code_paths`). The path is
where `make harnesses` installs it, or under $HARNESSRL_CLI_DIR (the agent-cli image's /opt/harnesses: set it for
the controller too when harnesses run as Kubernetes Jobs). It is not checked here, where the controller runs (on
Kubernetes the binary is in the agent's image, not the controller's): the harness checks it and names the fix.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel, Field

from controller.recipe import Grade, GradeInput
from recipes.cli_harness.binaries import CLAUDE_CODE, CLIS, CODEX, cli_dir
from recipes.swe.recipe import SWE_NO_SIGNAL_HINT, SweRecipe
from recipes.swe.run_metrics import swe_rollout_metrics
from rollouts.expectations import Rule
from rollouts.groups import FinishedGroup
from rollouts.task_options import HarnessFields, LevelsOption

if TYPE_CHECKING:
    from storage.directory_store import DirectoryStore


class CliTaskFields(HarnessFields):
    """The task fields the CLI harness reads besides the problem (recipes/cli_harness/launch.py DEFAULTS)."""

    model: str | None = Field(default=None, description="The model name the CLI asks for.")
    codex_model: str | None = Field(default=None, description="Codex's model name (Codex only).")
    step_limit: int | None = Field(default=None, ge=1, description="The CLI's turn limit.")
    max_tokens: int | None = Field(default=None, ge=1, description="Tokens per answer the CLI asks for.")
    command_timeout_s: float | None = Field(default=None, gt=0, description="Limit of one shell command.")


@dataclass(frozen=True)
class CliSweRecipe:
    """SWE tasks attempted by a coding CLI (`cli`: "claude-code" or "codex")."""

    name: str  # the recipe's registered name, which is also the CLI's
    swe: SweRecipe = field(default_factory=SweRecipe)  # tasks, working directory and grader
    cli_dir: Path | None = None  # where the CLIs are installed (None: binaries.cli_dir())
    no_signal_hint: ClassVar[str] = SWE_NO_SIGNAL_HINT  # the loop's advice after an iteration without reward variance
    recorded_turns: ClassVar[bool] = True  # the CLIs re-serialise their history: prompt re-sent turns from the record
    task_fields: ClassVar[type[BaseModel]] = CliTaskFields  # what rollout.task_overrides may set
    generator_options: ClassVar[type[BaseModel]] = LevelsOption  # what data.generator may set: the ladder mix

    def generate(self, count: int, seed: int, levels: dict[int, float] | None = None) -> list[dict[str, Any]]:
        """The `swe` recipe's tasks (`levels`: its ladder mix)."""
        return self.swe.generate(count, seed, levels)

    def harness_command(self) -> list[str]:
        """`python -m recipes.cli_harness.harness NAME BINARY`, the binary's path resolved."""
        binary = CLIS[self.name].binary(self.cli_dir or cli_dir()).resolve()
        return [sys.executable, "-m", "recipes.cli_harness.harness", self.name, str(binary)]

    def prepare_workdir(self, task: dict[str, Any], workdir: Path) -> None:
        """`repo/`: the buggy repository at its base, without .git (the `swe` recipe's layout)."""
        self.swe.prepare_workdir(task, workdir)

    def grade(self, graded: GradeInput) -> Grade:
        """The `swe` grader: reward 1.0 iff the diff of `repo/` resolves the instance in a fresh checkout."""
        return self.swe.grade(graded)

    def versioned_splits(self, uri: str, local_dir: Path,
                         store_at: Callable[[str], DirectoryStore]) -> tuple[list[dict], list[dict]]:
        """The data stage's hook: the `swe` recipe's versioned splits (the same tasks)."""
        return self.swe.versioned_splits(uri, local_dir, store_at)

    def task_rules(self) -> list[Rule]:
        """The data suite's hook: the `swe` recipe's (the same tasks)."""
        return self.swe.task_rules()


    def rollout_metrics(self, groups: Sequence[FinishedGroup], pass_threshold: float, prefix: str) -> dict[str, float]:
        """The loop's hook: the `swe` pass rates per ladder level (no action format: the CLI has its own)."""
        return swe_rollout_metrics(groups, pass_threshold, prefix, mini_swe_agent=False)


CLAUDE_CODE_RECIPE = CliSweRecipe(CLAUDE_CODE.name)
CODEX_RECIPE = CliSweRecipe(CODEX.name)
