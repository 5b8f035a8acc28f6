"""Prefect tasks of the data stage: load the task rows, validate them against the recipe's suite, publish the report."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from prefect import task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE

from flows.prefect_tasks.retries import io_failure
from recipes.expectations import ValidationReport, require_valid, validate_rows
from recipes.swe.datasets import default_store
from recipes.swe.evaluation import rollout_tasks
from recipes.swe.splits import fetch_splits, split_store_root
from rollouts.task_data import load_task_rows, split_rows
from storage.directory_store import DirectoryStore

SPLITS_PREFIX = "splits:"
"""data.source of a versioned SWE split written by `prepare-swe-data`: `splits:file:///…/NAME/VERSION` or s3://."""
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


@task(name="load-swe-splits", retries=2, retry_condition_fn=io_failure, retry_delay_seconds=10, cache_policy=NO_CACHE)
def load_swe_splits(store: DirectoryStore, uri: str, local_dir: Path, swe_store: Path) -> tuple[list[dict], list[dict]]:
    """The train and val rollout tasks of a versioned SWE split (written by `prepare-swe-data`): each instance as the
    `swe` recipe's rollout input (no fix, no tests), its repository in the generated store `swe_store`."""
    splits = fetch_splits(store, uri, local_dir)
    print(f"SWE splits {splits.manifest.name}/{splits.manifest.version}: {len(splits.train)} train, "
          f"{len(splits.val)} val (k={splits.manifest.k}, seed={splits.manifest.seed})")
    return rollout_tasks(splits.train, swe_store), rollout_tasks(splits.val, swe_store)


def load_versioned_splits(source: str, local_dir: Path,
                          store_at: Callable[[str], DirectoryStore]) -> tuple[list[dict], list[dict]]:
    """The train and val rows of a versioned split (`splits:URI`); `store_at(root)`: the store holding its root."""
    uri = source.removeprefix(SPLITS_PREFIX)
    return load_swe_splits(store_at(split_store_root(uri)), uri, local_dir, default_store())


def split_tasks(rows: list[dict[str, Any]], val_count: int, seed: int) -> tuple[list[dict], list[dict]]:
    """(train, validation) rows: `val_count` drawn with `seed`, stratified by `STRATUM` where rows have it."""
    return split_rows(rows, val_count, seed, stratify=STRATUM)
