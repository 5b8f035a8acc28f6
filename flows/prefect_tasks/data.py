"""Prefect tasks of the data stage: load the task rows, validate them against the recipe's suite, publish the report.

What is recipe-specific (the suite's own rules, a versioned split's rollout inputs) comes from the recipe's hooks
through the registry: this module imports no recipe."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from prefect import task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE

from flows.prefect_tasks.retries import io_failure
from rollouts.expectations import ValidationReport, require_valid, validate_rows
from rollouts.recipe import recipe_hooks
from rollouts.registry import get_recipe
from rollouts.task_data import SPLITS_PREFIX, load_task_rows, split_rows
from storage.directory_store import DirectoryStore

STRATUM = "level"
"""The column whose values share the validation draw in proportion (the SWE ladder's levels; tasks without one: one
stratum)."""


def report_artifact_key(recipe: str) -> str:
    """The artifact key of a recipe's validation report (Prefect keys allow lowercase letters, digits, dashes; a
    recipe file's path keeps its last characters)."""
    return f"data-validation-{re.sub(r'[^a-z0-9]+', '-', recipe.lower()).strip('-')[-80:]}"


@task(name="load-tasks", retries=2, retry_condition_fn=io_failure, retry_delay_seconds=10)
def load_dataset(source: str, recipe: str, count: int | None, seed: int, cache_dir: Path,
                 generator: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The task rows of `source` ("generated", a local file or directory, or a hub id[:split]; `generator`: the
    recipe generator's options)."""
    return load_task_rows(source, recipe=recipe, count=count, seed=seed, cache_dir=cache_dir, generator=generator)


@task(name="validate-tasks", cache_policy=NO_CACHE)
def validate_tasks(rows: list[dict[str, Any]], recipe: str) -> ValidationReport:
    """Runs the recipe's suite, publishes the report as a markdown artifact, raises DataValidationError on failure."""
    report = validate_rows(rows, recipe)
    create_markdown_artifact(markdown=report.to_markdown(), key=report_artifact_key(recipe),
                             description=f"task data validation for {recipe}: "
                                         f"{'passed' if report.success else 'FAILED'}")
    return require_valid(report)


@task(name="load-versioned-splits", retries=2, retry_condition_fn=io_failure, retry_delay_seconds=10,
      cache_policy=NO_CACHE)
def load_versioned_splits(source: str, recipe: str, local_dir: Path,
                          store_at: Callable[[str], DirectoryStore]) -> tuple[list[dict], list[dict]]:
    """The train and val rows of a versioned split (`splits:URI`, written by `prepare-swe-data`) as the recipe's
    rollout inputs, from its `versioned_splits` hook; `store_at(root)`: the store holding the split's root."""
    hook = recipe_hooks(get_recipe(recipe)).versioned_splits
    if hook is None:
        raise ValueError(f"data.source={source!r} is a versioned split, which recipe {recipe!r} cannot read (it has "
                         "no versioned_splits hook: the swe recipe and the coding CLIs' have); use a task file or "
                         "'generated' as data.source")
    return hook(source.removeprefix(SPLITS_PREFIX), local_dir, store_at)


def split_tasks(rows: list[dict[str, Any]], val_count: int, seed: int) -> tuple[list[dict], list[dict]]:
    """(train, validation) rows: `val_count` drawn with `seed`, stratified by `STRATUM` where rows have it."""
    return split_rows(rows, val_count, seed, stratify=STRATUM)
