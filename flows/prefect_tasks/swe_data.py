"""Prefect tasks of the SWE data pipeline: load, validate, each cleaning step (its counts logged), the difficulty
probes through the real loop in val mode, the selection, the versioned splits.

Tasks take live objects (clients, backends, stores), so none caches or persists its result.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prefect import task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE

from flows.prefect_tasks.retries import io_failure
from flows.prefect_tasks.rollouts import val_pass_with_progress
from gateway.client_roles import FeedClient
from gateway.records import FailureKind, RolloutMode, RolloutState
from recipes.swe.cleaning import (
    StepResult,
    drop_empty_statements,
    drop_missing_environment,
    drop_too_many_tests,
)
from recipes.swe.datasets import load_raw_swe_rows
from recipes.swe.difficulty import DifficultySplit, select_by_difficulty
from recipes.swe.environments import EnvironmentBackend
from recipes.swe.expectations import validate_swe_rows
from recipes.swe.instances import Source
from recipes.swe.splits import SplitManifest, publish_splits, write_splits
from rollouts.expectations import ValidationReport
from rollouts.feed import FeedConfig
from rollouts.groups import FinishedGroup
from storage.directory_store import DirectoryStore

SHOWN_DROPS = 5  # dropped ids quoted in a step's log line
NO_TASK = {"cache_policy": NO_CACHE, "persist_result": False}


def validation_artifact_key(kind: str) -> str:
    """The Prefect artifact key of a dataset's validation report."""
    return f"swe-data-validation-{kind}"


@task(name="load-swe-rows", retries=2, retry_condition_fn=io_failure, retry_delay_seconds=10, **NO_TASK)
def load_swe_rows(source: str, kind: Source, cache_dir: Path, split: str | None, limit: int | None,
                  store: Path | None) -> list[dict[str, Any]]:
    """The raw rows of `source` in the dataset's own columns ("generated": the SWE store `store`)."""
    rows = load_raw_swe_rows(source, kind, cache_dir=cache_dir, split=split, limit=limit, store=store)
    print(f"loaded {len(rows)} {kind} rows from {source}")
    return rows


@task(name="validate-swe-rows", **NO_TASK)
def validate_swe_data(rows: list[dict[str, Any]], kind: Source) -> ValidationReport:
    """Runs the dataset's suite and publishes the report as a Prefect markdown artifact (nothing raised here)."""
    report = validate_swe_rows(rows, kind)
    create_markdown_artifact(markdown=report.to_markdown(), key=validation_artifact_key(kind),
                             description=f"{kind} validation: {'passed' if report.success else 'FAILED'}, "
                                         f"{len(report.warnings())} warning(s)")
    return report


def log_step(result: StepResult) -> StepResult:
    """Logs a step's counts and a few of its drops; returns the result."""
    examples = "; ".join(f"{iid}: {reason}" for iid, reason in result.dropped[:SHOWN_DROPS])
    print(f"{result.name}: {result.n_in} in, {len(result.kept)} kept, {len(result.dropped)} dropped"
          + (f" (e.g. {examples})" if examples else ""))
    return result


@task(name="drop-empty-statements", **NO_TASK)
def clean_empty_statements(rows: list[dict[str, Any]]) -> StepResult:
    """Drops rows without a problem statement."""
    return log_step(drop_empty_statements(rows))


@task(name="drop-missing-environment", **NO_TASK)
def clean_missing_environment(rows: list[dict[str, Any]], backend: EnvironmentBackend) -> StepResult:
    """Asks the environment backend about every row and drops those whose environment is missing."""
    availability = backend.available(rows)
    return log_step(drop_missing_environment(rows, availability, backend.last_reasons))


@task(name="drop-too-many-tests", **NO_TASK)
def clean_too_many_tests(rows: list[dict[str, Any]], max_tests: int) -> StepResult:
    """Drops rows with more than `max_tests` FAIL_TO_PASS + PASS_TO_PASS tests."""
    return log_step(drop_too_many_tests(rows, max_tests))


@dataclass(frozen=True)
class ProbeResult:
    """The probe rollouts' outcomes per task."""

    outcomes: dict[str, list[float]]  # instance id -> k rewards (a rollout without a reward counts 0.0)
    unfinished: list[str]  # tasks whose group did not finish in time (left out of the selection)
    stats: dict[str, float] = field(default_factory=dict)  # probe/ metrics: rollouts, failed, infra failures


def probe_outcomes(groups: Sequence[FinishedGroup]) -> tuple[dict[str, list[float]], dict[str, float]]:
    """Rewards per task id from finished groups (failed rollouts count as 0.0) and the probe's counts."""
    outcomes: dict[str, list[float]] = {}
    rollouts = failed = infra = 0
    for group in groups:
        rewards = []
        for rollout in group.rollouts:
            rollouts += 1
            failed += rollout.state != RolloutState.SUCCEEDED
            infra += rollout.failure_kind == FailureKind.INFRA
            rewards.append(float(rollout.reward) if rollout.reward is not None else 0.0)
        outcomes[str(group.task["id"])] = rewards
    return outcomes, {"probe/rollouts": float(rollouts), "probe/failed_rollouts": float(failed),
                      "probe/infra_failures": float(infra)}


@task(name="probe-difficulty", **NO_TASK)
def probe_difficulty(client: FeedClient, tasks: Sequence[dict[str, Any]], k: int, id_prefix: str,
                     policy_version: int, timeout_s: float, max_attempts: int,
                     task_overrides: dict[str, Any] | None = None) -> ProbeResult:
    """k val-mode rollouts of every task (groups of k through the gateway); tasks unfinished after `timeout_s` are
    listed apart instead of failing the whole pipeline."""
    config = FeedConfig(k, id_prefix, RolloutMode.VAL, max_attempts=max_attempts, task_overrides=task_overrides,
                        fetch_calls=False)
    print(f"probing {len(tasks)} tasks x {k} rollouts in val mode")
    groups, unfinished = val_pass_with_progress(client, config, tasks, policy_version, timeout_s, "task",
                                  "they are left out of the selection")
    outcomes, stats = probe_outcomes(groups)
    stats["probe/unfinished_tasks"] = float(len(unfinished))
    print(f"probes: {len(outcomes)} tasks finished, {len(unfinished)} unfinished; {stats}")
    return ProbeResult(outcomes, unfinished, stats)


@task(name="select-by-difficulty", **NO_TASK)
def select_splits(outcomes: Mapping[str, Sequence[float]], k: int, n_mixed: int, n_unsolved: int, n_heldout: int,
                  seed: int, pass_threshold: float, levels: Mapping[str, int] | None = None) -> DifficultySplit:
    """The difficulty filter's training and held-out ids (held-out stratified by ladder level when `levels` are
    given); logs the class counts."""
    split = select_by_difficulty(outcomes, k=k, n_mixed=n_mixed, n_unsolved=n_unsolved, n_heldout=n_heldout,
                                 seed=seed, pass_threshold=pass_threshold, levels=levels)
    print(f"difficulty (k={k}): {split.counts.as_dict()}")
    return split


@task(name="write-swe-splits", retries=2, retry_condition_fn=io_failure, retry_delay_seconds=10, **NO_TASK)
def write_versioned_splits(directory: Path, store: DirectoryStore, train: list[dict[str, Any]],
                           val: list[dict[str, Any]], manifest_fields: dict[str, Any]) -> tuple[str, SplitManifest]:
    """Writes the split folder under `directory` and publishes it to `store`; returns its URI and manifest."""
    folder, manifest = write_splits(directory, train, val, **manifest_fields)
    uri = publish_splits(folder, store)
    print(f"splits {manifest.name}/{manifest.version}: {manifest.n_train} train, {manifest.n_val} val -> {uri}")
    return uri, manifest


@task(name="publish-swe-data-summary", **NO_TASK)
def publish_summary(markdown: str) -> None:
    """The pipeline's counts as the Prefect markdown artifact `swe-data-summary`."""
    create_markdown_artifact(markdown=markdown, key="swe-data-summary", description="SWE data pipeline counts")
