"""The recipe seam: what the controller needs from a recipe (task source, harness command, grader), and the optional
hooks through which the training loop, its metrics and its reports ask a recipe for anything recipe-specific.

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

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel

from gateway.records import CallRecord
from rollouts.groups import FinishedGroup
from rollouts.task_options import NoGeneratorOptions, TaskOverrides

TASK_FILE = "task.json"


class GraderInfraError(RuntimeError):
    """A grader's own failure that the policy cannot cause (its store or cluster unreachable, its sandbox not
    buildable): the rollout fails as `infra`. Any other exception a grader raises is the agent's failure (reward 0),
    since a grader reads what the policy wrote and a crash on that input is the policy's doing."""


@dataclass(frozen=True)
class GradeInput:
    """Everything a grader may look at."""

    task: dict[str, Any]  # the rollout's whole input (the harness saw only the recipe's `harness_task(task)`)
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
        the caps the working directory must stay within before this is called (default TreeLimits()). Optional
        method `harness_readonly()`: absolute paths of the harness's own code the local runner's sandbox binds
        read-only (a recipe file's harness files, never its folder: the policy reads all of it); optional mapping
        `run_settings`: run settings the recipe brings (a recipe file's `settings:`), applied over the profile and
        under --set. Optional method `harness_task(task)`:
        the part of the task the harness may see, written to its task file (default: the whole task, only for a
        recipe whose tasks hold nothing the grader keeps secret; a task's answer must not reach the harness, where
        the policy reads every file). Optional attribute `failure_reward` (default 0.0): the reward posted when the
        attempt's tree is refused or the grader fails on what the agent left; it must be the bottom of the grader's
        scale, so that breaking the grader never beats a verdict."""
        ...


def final_text(calls: Sequence[CallRecord]) -> str:
    """The text of the last successful agent call's answer ('' when there is none): what most graders score. Side
    calls (a harness's own bookkeeping requests, `CallRecord.side`) are not the agent's answer and are skipped, as the
    shaping terms skip them."""
    for call in reversed(calls):
        if call.status == "ok" and call.response_text is not None and not call.side:
            return call.response_text
    return ""


DEFAULT_NO_SIGNAL_HINT = ("use a larger model or easier tasks, or give the small model a signal with a shaping term "
                          "(a recipe with a `shaping_shares` hook and algorithm.advantage.format_reward > 0)")
"""The no-signal hint of a recipe that defines none."""

RolloutMetrics = Callable[[Sequence[FinishedGroup], float, str], dict[str, float]]
"""(groups, pass_threshold, prefix) -> `{prefix}/...` metrics of a batch or a validation pass."""
ShapingShares = Callable[[Sequence[FinishedGroup]], Mapping[str, float]]
"""groups -> per rollout id, a share in [0, 1] that the training-only shaping term weighs (trainer.format_reward)."""
VersionedSplits = Callable[[str, Path, Callable[[str], Any]], tuple[list[dict], list[dict]]]
"""(uri, local_dir, store_at) -> the (train, val) rollout inputs of the versioned split at `uri` (`store_at(root)`: the
`storage.directory_store.DirectoryStore` at a root)."""


def no_rollout_metrics(groups: Sequence[FinishedGroup], pass_threshold: float, prefix: str) -> dict[str, float]:
    """The default `rollout_metrics` hook: nothing beyond the loop's own metrics."""
    return {}


@dataclass(frozen=True)
class RecipeHooks:
    """What the loop asks a recipe beyond the protocol; each an optional attribute of the recipe with a default.

    - `rollout_metrics(groups, pass_threshold, prefix)`: extra metrics of a batch and of a validation pass (default:
      none);
    - `shaping_shares(groups)`: per rollout, a share in [0, 1] of the training-only shaping term
      (`algorithm.advantage.format_reward` x share is added to the reward before advantages; default: none, and the
      term is refused when configured);
    - `no_signal_hint`: the advice printed after an iteration without reward variance (default: a generic one);
    - `metrics_read_calls`: whether `rollout_metrics` reads the groups' calls, so validation fetches them (default
      False);
    - `task_rules()`: the recipe's own data expectations (`rollouts.expectations.Rule`s, looked up by
      `rollouts.expectations.recipe_rules`; default: none beyond the common rules);
    - `versioned_splits(uri, local_dir, store_at)`: the (train, val) rollout inputs of a versioned split, what
      `data.source: splits:URI` reads (`store_at(root)`: the directory store at a root; default None: the recipe has
      none, and such a source is refused);
    - `recorded_turns`: whether the run's gateway prompts a re-sent assistant turn from its recorded tokens (gateway
      config `recorded_turns`; for harnesses that re-serialise their history, such as the coding CLIs; default False);
    - `generator_options`: the pydantic model of `generate`'s keyword options, what `data.generator` may hold
      (`rollouts.task_options`; default: none);
    - `task_fields`: the pydantic model of the task fields its harness reads, what `rollout.task_overrides` may hold
      (default `TaskOverrides`: the common fields typed, others passed on).
    """

    rollout_metrics: RolloutMetrics = no_rollout_metrics
    shaping_shares: ShapingShares | None = None
    no_signal_hint: str = DEFAULT_NO_SIGNAL_HINT
    metrics_read_calls: bool = False
    recorded_turns: bool = False
    generator_options: type[BaseModel] = NoGeneratorOptions
    task_fields: type[BaseModel] = TaskOverrides
    versioned_splits: VersionedSplits | None = None


def recipe_hooks(recipe: object) -> RecipeHooks:
    """The recipe's hooks, each its own attribute when it defines one, else the default."""
    defaults = RecipeHooks()
    return RecipeHooks(rollout_metrics=getattr(recipe, "rollout_metrics", defaults.rollout_metrics),
                       shaping_shares=getattr(recipe, "shaping_shares", defaults.shaping_shares),
                       no_signal_hint=str(getattr(recipe, "no_signal_hint", defaults.no_signal_hint)),
                       metrics_read_calls=bool(getattr(recipe, "metrics_read_calls", defaults.metrics_read_calls)),
                       recorded_turns=bool(getattr(recipe, "recorded_turns", defaults.recorded_turns)),
                       generator_options=getattr(recipe, "generator_options", defaults.generator_options),
                       task_fields=getattr(recipe, "task_fields", defaults.task_fields),
                       versioned_splits=getattr(recipe, "versioned_splits", defaults.versioned_splits))
