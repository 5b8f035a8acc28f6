"""Prefect tasks of the SWE-bench evaluation: find the latest training checkpoint, fetch the weights, load the
instances, read each rollout's outcome from its reward event, publish predictions and the report."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlflow import MlflowClient
from prefect import task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE

from flows.prefect_tasks.retries import io_failure
from flows.prefect_tasks.rollouts import val_pass_with_progress
from gateway.client_roles import FeedClient, RecordsClient
from gateway.records import EventKind, RolloutMode
from recipes.swe.datasets import load_swe_dataset
from recipes.swe.evaluation_report import EvaluationReport, InstanceOutcome, outcome_from_rollout
from recipes.swe.instances import Source
from recipes.swe.predictions import Prediction, write_predictions
from rollouts.feed import FeedConfig
from rollouts.groups import FinishedGroup
from storage.checkpoint_store import CheckpointStore
from tracking.mlflow_tracker import MlflowTracker

REPORT_ARTIFACT_KEY = "swe-bench-verified-report"
PREDICTIONS_FILE, REPORT_JSON, REPORT_MARKDOWN = "predictions.jsonl", "report.json", "report.md"


@dataclass(frozen=True)
class TrainCheckpoint:
    """The checkpoint a training run last tagged."""

    checkpoint_uri: str  # the run's `checkpoint_uri` tag
    run_id: str  # the MLflow run id
    run_name: str  # the MLflow run name


def find_latest_checkpoint(tracking_uri: str, recipe: str = "swe") -> TrainCheckpoint | None:
    """The newest live run (any experiment) tagged `recipe` with a `checkpoint_uri` tag, as flows/train.py tags
    its runs; None when there is none."""
    client = MlflowClient(tracking_uri=tracking_uri)
    experiments = [e.experiment_id for e in client.search_experiments()]
    if not experiments:
        return None
    quoted = recipe.replace("'", "\\'")
    runs = client.search_runs(experiments, filter_string=f"tags.recipe = '{quoted}' AND tags.checkpoint_uri != ''",
                              max_results=1, order_by=["attributes.start_time DESC"])
    if not runs:
        return None
    run = runs[0]
    return TrainCheckpoint(run.data.tags["checkpoint_uri"], run.info.run_id, run.info.run_name or "")


@task(name="find-latest-checkpoint", cache_policy=NO_CACHE, persist_result=False,
      retries=2, retry_condition_fn=io_failure, retry_delay_seconds=5)
def latest_train_checkpoint(tracking_uri: str, recipe: str = "swe") -> TrainCheckpoint | None:
    """The latest checkpoint of the `recipe` training runs (see `find_latest_checkpoint`)."""
    return find_latest_checkpoint(tracking_uri, recipe)


@task(name="download-checkpoint", cache_policy=NO_CACHE, persist_result=False,
      retries=2, retry_condition_fn=io_failure, retry_delay_seconds=10)
def download_checkpoint(store: CheckpointStore, checkpoint_uri: str, local_dir: Path) -> Path:
    """The checkpoint at `checkpoint_uri`, copied under `local_dir` (the store reuses a complete copy already there)."""
    return store.download(checkpoint_uri, local_dir)


@task(name="load-swe-instances", cache_policy=NO_CACHE, persist_result=False,
      retries=2, retry_condition_fn=io_failure, retry_delay_seconds=10)
def load_instances(source: str, kind: Source, cache_dir: Path, split: str | None, limit: int | None,
                   store: Path) -> list[dict[str, Any]]:
    """Normalised instances of `source` ("generated": the SWE store `store`, a local file, or a hub id)."""
    return load_swe_dataset(source, kind, cache_dir=cache_dir, split=split, limit=limit, store=store)


def reward_details(client: RecordsClient, rollout_id: str) -> dict[str, Any] | None:
    """The details of the rollout's last reward event (None: no reward was posted)."""
    rewards = [e for e in client.list_events(rollout_id) if e.kind == EventKind.REWARD]
    return dict(rewards[-1].payload.get("details") or {}) if rewards else None


@task(name="run-eval-rollouts", cache_policy=NO_CACHE, persist_result=False)
def run_rollouts(client: FeedClient, tasks: Sequence[dict[str, Any]], id_prefix: str, policy_version: int,
                 timeout_s: float, max_attempts: int,
                 task_overrides: dict[str, Any] | None = None) -> tuple[list[FinishedGroup], list[str]]:
    """Each task once in val mode (groups of 1); the finished groups and the ids of tasks without a verdict after
    `timeout_s` (reported as infra failures instead of failing the whole evaluation)."""
    config = FeedConfig(1, id_prefix, RolloutMode.VAL, max_attempts=max_attempts, task_overrides=task_overrides,
                        fetch_calls=False)
    return val_pass_with_progress(client, config, tasks, policy_version, timeout_s, "instance",
                                  "they are reported as infra failures")


@task(name="collect-outcomes", cache_policy=NO_CACHE, persist_result=False)
def collect_outcomes(client: RecordsClient, groups: Sequence[FinishedGroup],
                     repos: Mapping[str, str]) -> list[InstanceOutcome]:
    """One outcome per rollout (group size 1): its state and the agent's patch from the reward event."""
    outcomes = []
    for group in groups:
        for rollout in group.rollouts:
            instance_id = str(group.task["id"])
            outcomes.append(outcome_from_rollout(
                instance_id, repos.get(instance_id, "unknown"), state=str(rollout.state),
                failure_kind=str(rollout.failure_kind) if rollout.failure_kind else None, error=rollout.error,
                reward_details=reward_details(client, rollout.id)))
    return outcomes


@task(name="publish-evaluation", cache_policy=NO_CACHE, persist_result=False)
def publish_evaluation(tracker: MlflowTracker, report: EvaluationReport, predictions: Sequence[Prediction],
                       out_dir: Path) -> dict[str, Path]:
    """Predictions JSONL and the report (JSON, markdown) on disk, in the MLflow run, and as a Prefect artifact."""
    out_dir.mkdir(parents=True, exist_ok=True)
    files = {"predictions": write_predictions(predictions, out_dir / PREDICTIONS_FILE),
             "report_json": out_dir / REPORT_JSON, "report_markdown": out_dir / REPORT_MARKDOWN}
    markdown = report.to_markdown()
    files["report_json"].write_text(json.dumps(report.model_dump(mode="json"), indent=2), encoding="utf-8")
    files["report_markdown"].write_text(markdown, encoding="utf-8")
    tracker.log_metrics(report.metrics(), step=0)
    tracker.log_text(files["predictions"].read_text(encoding="utf-8"), PREDICTIONS_FILE)
    tracker.log_dict(report.model_dump(mode="json"), REPORT_JSON)
    tracker.log_text(markdown, REPORT_MARKDOWN)
    create_markdown_artifact(markdown=markdown, key=REPORT_ARTIFACT_KEY,
                             description=f"SWE-bench evaluation of {report.model}: {report.resolved}/"
                                         f"{report.submitted} resolved")
    return files


@task(name="report-no-checkpoint", cache_policy=NO_CACHE, persist_result=False)
def publish_no_checkpoint(message: str) -> None:
    """The nightly run found nothing to evaluate: say so as the report artifact."""
    create_markdown_artifact(markdown=f"# SWE-bench evaluation skipped\n\n{message}\n", key=REPORT_ARTIFACT_KEY,
                             description="no train-swe checkpoint to evaluate")
