"""One attempt of a claimed rollout: its recipe, its key, its working directory and log files, its RunSpec."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from controller.config import ControllerConfig
from controller.recipe import TASK_FILE, Recipe
from controller.runners.base import RunSpec
from gateway.records import ClaimedRollout, Rollout


@dataclass(frozen=True)
class Attempt:
    """A claimed rollout being run once."""

    rollout: Rollout  # the rollout as claimed (state running, attempt >= 1)
    recipe: Recipe  # the recipe that runs and grades it
    spec: RunSpec  # what the runner starts


def recipe_name(rollout: Rollout, configured: str | None) -> str:
    """The configured recipe, else the task's "recipe" key; raises KeyError naming the fix when there is neither."""
    if configured:
        return configured
    name = rollout.input.get("recipe")
    if not isinstance(name, str) or not name:
        raise KeyError(f"rollout {rollout.id!r} has no 'recipe' in its input and the controller has no --recipe; "
                       "start the controller with --recipe NAME or create the rollout with input.recipe")
    return name


def attempt_paths(config: ControllerConfig, rollout: Rollout) -> tuple[Path, Path, Path]:
    """(workdir, stdout, stderr) of the rollout's current attempt; the suffix keeps ids like '..' inside the parents."""
    stem = f"{rollout.id}.a{rollout.attempt}"
    logs = config.logs_dir.resolve()
    return config.work_dir.resolve() / stem, logs / f"{stem}.stdout", logs / f"{stem}.stderr"


def harness_timeout_s(config: ControllerConfig, task: dict) -> float:
    """The task's own `harness_timeout_s` when it sets one (a recipe's budget), else the controller's."""
    value = task.get("harness_timeout_s", config.harness_timeout_s)
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"task harness_timeout_s={value!r} must be a positive number of seconds")
    return float(value)


def harness_readonly(recipe: Recipe) -> tuple[Path, ...]:
    """The recipe's optional `harness_readonly()`: files and folders of its harness's own code the sandbox binds
    read-only (a recipe file's harness files, never anything of its grader's); absolute paths only."""
    hook = getattr(recipe, "harness_readonly", None)
    paths = tuple(Path(path) for path in hook()) if hook is not None else ()
    relative = [str(path) for path in paths if not path.is_absolute()]
    if relative:
        raise ValueError(f"recipe {getattr(recipe, 'name', recipe)!r}: harness_readonly() must give absolute paths, "
                         f"got {relative}")
    return paths


def harness_task(recipe: Recipe, task: dict) -> dict:
    """The part of `task` the harness may see: the recipe's optional `harness_task(task)` (a task's answer and other
    grader-only fields left out), else the whole task. The grader still gets the whole task (controller/report.py)."""
    hook = getattr(recipe, "harness_task", None)
    visible = hook(dict(task)) if hook is not None else dict(task)
    if not isinstance(visible, dict):
        raise TypeError(f"recipe {getattr(recipe, 'name', recipe)!r}: harness_task() must return a dict, got "
                        f"{type(visible).__name__}")
    return visible


def prepare_attempt(config: ControllerConfig, rollout: ClaimedRollout, recipe: Recipe) -> Attempt:
    """Write the harness's part of the task (`harness_task`) as task.json into a fresh working directory, let the
    recipe lay it out, and build the RunSpec (with the base URL and key the claim returned for this attempt: no
    second request)."""
    workdir, stdout, stderr = attempt_paths(config, rollout)
    if workdir.exists():
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True)
    stdout.parent.mkdir(parents=True, exist_ok=True)
    visible = harness_task(recipe, rollout.input)  # never the grader-only fields: the policy reads this file
    (workdir / TASK_FILE).write_text(json.dumps(visible))
    recipe.prepare_workdir(rollout.input, workdir)
    spec = RunSpec(rollout_id=rollout.id, attempt=rollout.attempt, command=tuple(recipe.harness_command()),
                   base_url=rollout.base_url, api_key=rollout.api_key, task=visible, workdir=workdir,
                   timeout_s=harness_timeout_s(config, rollout.input), stdout_path=stdout, stderr_path=stderr,
                   extra_env=config.harness_env, readonly=harness_readonly(recipe))
    return Attempt(rollout, recipe, spec)
