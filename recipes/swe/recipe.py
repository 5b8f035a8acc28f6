"""The `swe` recipe: generated SWE-smith-style tasks, mini-swe-agent in the local sandbox, the fresh-checkout grader.

The rollout input (what the harness and the agent can read) holds only the instance id, the problem statement and the
store path; the bug patch and the tests to run stay in the store, which is in no sandbox: not the local runner's (the
harness), not the agent's commands', not the grading runs'.
Configuration: $HARNESSRL_SWE_STORE (default ~/.cache/harnessrl/swe) and $HARNESSRL_SWE_SOURCE (`pypi:<name>` or a
local project path; default pypi:xmltodict). Grading follows the runner: when $HARNESSRL_SWE_CONTROLLER_CONFIG names a
controller config with `runner: kubernetes` (the shipped manifests), each rollout is graded in a grading Job
(`kube_grading_swe`); otherwise locally under bubblewrap (`grader`).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel, Field, field_validator

from controller.recipe import Grade, GradeInput, GraderInfraError
from recipes.swe.generator import bug_id, find_instance, generate_or_reuse
from recipes.swe.grader import checkout, grade_workdir
from recipes.swe.harness import REPO_DIR
from recipes.swe.harness_configs import DEFAULT_CONFIG, config_names, copy_to_workdir
from recipes.swe.kube_grading_swe import JobGrading, job_settings_from_env
from recipes.swe.ladder import LadderMix, instance_level
from recipes.swe.run_metrics import rollout_format_shares, swe_rollout_metrics
from rollouts.expectations import Rule, required_field
from rollouts.groups import FinishedGroup
from rollouts.task_options import LevelsOption, SamplingFields

if TYPE_CHECKING:
    from storage.directory_store import DirectoryStore

DEFAULT_SOURCE = "pypi:xmltodict"
SWE_NO_SIGNAL_HINT = ("SWE tasks need a capable coding model: 7B-class coder models (e.g. a Qwen2.5-Coder-7B-Instruct) "
                      "solve some SWE-smith tasks; a 135M model almost never does. Train the SWE recipe on GPUs with a "
                      "larger model (profile swe-gpu), or try `make train RECIPE=if` to see learning on this machine")


def _default_store() -> Path:
    return Path(os.environ.get("HARNESSRL_SWE_STORE", Path.home() / ".cache" / "harnessrl" / "swe"))


def rollout_input(instance: dict[str, Any], store: Path) -> dict[str, Any]:
    """The task a rollout carries: nothing that leaks the fix beyond what its ladder level's statement says."""
    return {"id": instance["instance_id"], "problem_statement": instance["problem_statement"],
            "store": str(store.resolve()), "level": instance_level(instance), "family": bug_id(instance)}


class SweTaskFields(SamplingFields):
    """The task fields the SWE harness (mini-swe-agent) reads besides the problem."""

    step_limit: int | None = Field(default=None, ge=1, description="Agent steps (model calls) per attempt.")
    command_timeout_s: float | None = Field(default=None, gt=0, description="Limit of one shell command.")
    harness_config: str | None = Field(default=None, description="The mini-swe-agent configuration by name "
                                       "(recipes/swe/configs).")

    @field_validator("harness_config")
    @classmethod
    def _known_config(cls, name: str | None) -> str | None:
        if name is not None and name not in config_names():
            raise ValueError(f"{name!r} is not a SWE harness configuration; use one of {config_names()}")
        return name


@dataclass(frozen=True)
class SweRecipe:
    """Generated bug-fix tasks graded by their FAIL_TO_PASS / PASS_TO_PASS tests."""

    name: str = "swe"
    store: Path = field(default_factory=_default_store)  # where bases and instances.jsonl live
    source: str = field(default_factory=lambda: os.environ.get("HARNESSRL_SWE_SOURCE", DEFAULT_SOURCE))
    job_grading: JobGrading | None = None  # grading Jobs (tests pass one); None: from the environment, if any
    no_signal_hint: ClassVar[str] = SWE_NO_SIGNAL_HINT  # the loop's advice after an iteration without reward variance
    metrics_read_calls: ClassVar[bool] = True  # the action-format rate reads the validation rollouts' calls
    task_fields: ClassVar[type[BaseModel]] = SweTaskFields  # what rollout.task_overrides may set
    generator_options: ClassVar[type[BaseModel]] = LevelsOption  # what data.generator may set: the ladder mix

    def generate(self, count: int, seed: int, levels: dict[int, float] | None = None) -> list[dict[str, Any]]:
        """`count` tasks (generated and stored, or reused from the store), reproducible from `seed` for a given
        source; `levels` is the ladder mix (level -> weight, `recipes.swe.ladder`; default: every task at the original
        level)."""
        mix = LadderMix() if levels is None else LadderMix(levels=levels)
        instances = generate_or_reuse(self.source, self.store, count, seed, mix)
        if len(instances) < count:
            raise RuntimeError(f"only {len(instances)} of {count} bugs in {self.source} broke a test; "
                               f"ask for fewer tasks or use a project with more tests")
        return [rollout_input(instance, self.store) for instance in instances]

    def harness_command(self) -> list[str]:
        """mini-swe-agent through recipes/swe/harness.py."""
        return [sys.executable, "-m", "recipes.swe.harness"]

    def prepare_workdir(self, task: dict[str, Any], workdir: Path) -> None:
        """`repo/`: the buggy repository at its base, without .git; the harness configuration the task names (the
        harness's sandbox sees only its Python files)."""
        checkout(Path(task["store"]), find_instance(Path(task["store"]), task["id"]), workdir / REPO_DIR)
        copy_to_workdir(str(task.get("harness_config") or DEFAULT_CONFIG), workdir)

    def grade(self, graded: GradeInput) -> Grade:
        """Reward 1.0 iff the agent's diff resolves the instance in a fresh checkout."""
        store = Path(graded.task["store"])
        instance, repo, jobs = _instance(store, graded.task["id"]), graded.workdir / REPO_DIR, self._jobs()
        grade = grade_workdir(store, instance, repo) if jobs is None else \
            jobs.grade_workdir(store, instance, repo, graded.workdir.name)
        return Grade(reward=grade.reward, details={**grade.details, "exit_code": graded.exit_code})

    def rollout_metrics(self, groups: Sequence[FinishedGroup], pass_threshold: float, prefix: str) -> dict[str, float]:
        """The loop's hook: pass rates per ladder level and mini-swe-agent's action-format rate (recipes/swe/
        run_metrics.py)."""
        return swe_rollout_metrics(groups, pass_threshold, prefix, mini_swe_agent=True)

    def shaping_shares(self, groups: Sequence[FinishedGroup]) -> dict[str, float]:
        """The loop's shaping hook: per rollout, the share of its turns in mini-swe-agent's action format."""
        return rollout_format_shares(groups)

    def versioned_splits(self, uri: str, local_dir: Path,
                         store_at: Callable[[str], DirectoryStore]) -> tuple[list[dict], list[dict]]:
        """The data stage's hook for `data.source: splits:URI` (a versioned split of `prepare-swe-data`): its train
        and val instances as rollout inputs (no fix, no tests), their repositories in the generated store."""
        from recipes.swe.datasets import default_store
        from recipes.swe.evaluation import split_rollout_tasks
        from recipes.swe.splits import split_store_root

        return split_rollout_tasks(store_at(split_store_root(uri)), uri, local_dir, default_store())

    def task_rules(self) -> list[Rule]:
        """The data suite's hook: the rollout input (`rollout_input`): a statement, the store, the repository, the
        failing tests and the bug's patch."""
        return [*required_field("problem_statement", "text"), *required_field("store", "text"),
                Rule("repo_non_empty", "repo", "text", "repo is a non-empty string"),
                Rule("FAIL_TO_PASS_non_empty", "FAIL_TO_PASS", "list", "FAIL_TO_PASS is a non-empty list"),
                Rule("patch_non_empty", "patch", "text", "patch is a non-empty string")]

    def _jobs(self) -> JobGrading | None:
        """The grading Jobs when the controller runs on Kubernetes (read once from the environment)."""
        if self.job_grading is None and (settings := job_settings_from_env()) is not None:
            object.__setattr__(self, "job_grading", JobGrading(settings))
        return self.job_grading


def _instance(store: Path, instance_id: str) -> dict[str, Any]:
    """The task's instance from the store (outside every sandbox: the policy cannot remove it, so its absence is
    the grader's own failure)."""
    try:
        return find_instance(store, instance_id)
    except (KeyError, OSError, ValueError) as error:
        raise GraderInfraError(f"the task store {store} has no readable instance {instance_id!r}: {error}; "
                               "check $HARNESSRL_SWE_STORE") from error


RECIPE = SweRecipe()
